import RichPushCore

extension Bitmap {
    /// A polyline of width `lineWidth` pixels with round joins and caps. A single point draws a dot.
    mutating func stroke(_ points: [(Double, Double)], lineWidth: Double, color: RGBAColor) {
        guard !points.isEmpty, lineWidth.isFinite, points.allSatisfy({ $0.0.isFinite && $0.1.isFinite }) else { return }
        let r = lineWidth / 2
        var minX = Double.infinity
        var minY = Double.infinity
        var maxX = -Double.infinity
        var maxY = -Double.infinity
        for (x, y) in points {
            minX = min(minX, x)
            minY = min(minY, y)
            maxX = max(maxX, x)
            maxY = max(maxY, y)
        }
        guard
            var mask = CoverageMask(
                minX: minX - r - 1,
                minY: minY - r - 1,
                maxX: maxX + r + 1,
                maxY: maxY + r + 1,
                clipWidth: width,
                clipHeight: height
            )
        else { return }
        if points.count == 1 {
            mask.addSegment(points[0].0, points[0].1, points[0].0, points[0].1, radius: r)
        }
        for i in 1..<max(1, points.count) {
            mask.addSegment(points[i - 1].0, points[i - 1].1, points[i].0, points[i].1, radius: r)
        }
        mask.draw(on: &self, color: color)
    }

    /// Several polylines as one shape (the strokes of a line of text).
    mutating func stroke(paths: [[(Double, Double)]], lineWidth: Double, color: RGBAColor) {
        let r = lineWidth / 2
        let all = paths.flatMap { $0 }
        guard !all.isEmpty, lineWidth.isFinite, all.allSatisfy({ $0.0.isFinite && $0.1.isFinite }) else { return }
        let minX = all.map(\.0).min()!
        let maxX = all.map(\.0).max()!
        let minY = all.map(\.1).min()!
        let maxY = all.map(\.1).max()!
        guard
            var mask = CoverageMask(
                minX: minX - r - 1,
                minY: minY - r - 1,
                maxX: maxX + r + 1,
                maxY: maxY + r + 1,
                clipWidth: width,
                clipHeight: height
            )
        else { return }
        for path in paths {
            if path.count == 1 { mask.addSegment(path[0].0, path[0].1, path[0].0, path[0].1, radius: r) }
            for i in 1..<max(1, path.count) {
                mask.addSegment(path[i - 1].0, path[i - 1].1, path[i].0, path[i].1, radius: r)
            }
        }
        mask.draw(on: &self, color: color)
    }

    /// An axis-aligned rectangle with exact area coverage at its edges (hairline grid lines stay crisp).
    mutating func fill(x0: Double, y0: Double, x1: Double, y1: Double, color: RGBAColor) {
        guard x0.isFinite, y0.isFinite, x1.isFinite, y1.isFinite else { return }
        let ax = max(0, Bitmap.pixel(x0.rounded(.down)))
        let bx = min(width - 1, Bitmap.pixel(x1.rounded(.up)) - 1)
        let ay = max(0, Bitmap.pixel(y0.rounded(.down)))
        let by = min(height - 1, Bitmap.pixel(y1.rounded(.up)) - 1)
        guard ax <= bx, ay <= by else { return }
        for py in ay...by {
            let oy = min(y1, Double(py + 1)) - max(y0, Double(py))
            for px in ax...bx {
                let ox = min(x1, Double(px + 1)) - max(x0, Double(px))
                let cov = ox * oy
                if cov > 0 { blend(x: px, y: py, alpha: alpha(cov, color), color: color) }
            }
        }
    }

    /// A rectangle with rounded corners, clipped to rows `clipY0..<clipY1` (so that a bar can stand
    /// square on its baseline).
    mutating func fillRoundedRect(
        x0: Double,
        y0: Double,
        x1: Double,
        y1: Double,
        radius: Double,
        clipY0: Double,
        clipY1: Double,
        color: RGBAColor
    ) {
        guard [x0, y0, x1, y1, radius, clipY0, clipY1].allSatisfy(\.isFinite) else { return }
        let r = min(radius, (x1 - x0) / 2, (y1 - y0) / 2)
        let cx = (x0 + x1) / 2
        let cy = (y0 + y1) / 2
        let hx = (x1 - x0) / 2 - r
        let hy = (y1 - y0) / 2 - r
        let ax = max(0, Bitmap.pixel(x0.rounded(.down)))
        let bx = min(width - 1, Bitmap.pixel(x1.rounded(.up)))
        let ay = max(0, Bitmap.pixel(max(y0, clipY0).rounded(.down)))
        let by = min(height - 1, Bitmap.pixel(min(y1, clipY1).rounded(.up)))
        guard ax <= bx, ay <= by else { return }
        for py in ay...by {
            let pcy = Double(py) + 0.5
            // Rows cut by the clip edges get their share of coverage.
            let rowShare = max(0, min(clipY1, Double(py + 1)) - max(clipY0, Double(py)))
            if rowShare <= 0 { continue }
            for px in ax...bx {
                let qx = abs(Double(px) + 0.5 - cx) - hx
                let qy = abs(pcy - cy) - hy
                let ox = max(qx, 0)
                let oy = max(qy, 0)
                let d = (ox * ox + oy * oy).squareRoot() + min(max(qx, qy), 0) - r
                let cov = min(max(0.5 - d, 0), 1) * min(rowShare, 1)
                if cov > 0 { blend(x: px, y: py, alpha: alpha(cov, color), color: color) }
            }
        }
    }

    /// The region between a polyline (points sorted by x) and a horizontal baseline, filled with `color`
    /// whose opacity runs from `topAlpha` at `gradientTop` to `bottomAlpha` at the baseline.
    mutating func fillUnder(
        _ points: [(Double, Double)],
        baseline: Double,
        gradientTop: Double,
        color: RGBAColor,
        topAlpha: Double,
        bottomAlpha: Double
    ) {
        guard points.count >= 2, baseline.isFinite, gradientTop.isFinite, topAlpha.isFinite, bottomAlpha.isFinite,
            points.allSatisfy({ $0.0.isFinite && $0.1.isFinite })
        else { return }
        let firstX = points[0].0
        let lastX = points[points.count - 1].0
        let ax = max(0, Bitmap.pixel(firstX.rounded(.down)))
        let bx = min(width - 1, Bitmap.pixel(lastX.rounded(.up)) - 1)
        guard ax <= bx else { return }
        var seg = 0
        let span = max(baseline - gradientTop, 1)
        for px in ax...bx {
            // Horizontal coverage of this column by the filled span [firstX, lastX].
            let colShare = min(lastX, Double(px + 1)) - max(firstX, Double(px))
            if colShare <= 0 { continue }
            let cx = min(max(Double(px) + 0.5, firstX), lastX)
            while seg < points.count - 2 && points[seg + 1].0 < cx { seg += 1 }
            let (x0, y0) = points[seg]
            let (x1, y1) = points[seg + 1]
            let t = x1 > x0 ? (cx - x0) / (x1 - x0) : 0
            let lineY = y0 + (y1 - y0) * t
            let top = min(lineY, baseline)
            let bottom = max(lineY, baseline)
            let ay = max(0, Bitmap.pixel(top.rounded(.down)))
            let by = min(height - 1, Bitmap.pixel(bottom.rounded(.up)) - 1)
            guard ay <= by else { continue }
            for py in ay...by {
                let share = min(bottom, Double(py + 1)) - max(top, Double(py))
                if share <= 0 { continue }
                let g = min(max((Double(py) + 0.5 - gradientTop) / span, 0), 1)
                let opacity = topAlpha + (bottomAlpha - topAlpha) * g
                let cov = share * min(colShare, 1) * opacity
                blend(x: px, y: py, alpha: alpha(cov, color), color: color)
            }
        }
    }

    @inline(__always)
    private func alpha(_ coverage: Double, _ color: RGBAColor) -> UInt32 {
        coverage > 0 ? UInt32((min(coverage, 1) * Double(color.a)).rounded()) : 0
    }

    /// A pixel index from a position in pixels, pinned to a range far outside any bitmap: positions come from
    /// the payload's numbers, and no conversion may trap whatever they are. Callers check `isFinite` first.
    @inline(__always)
    static func pixel(_ position: Double) -> Int {
        guard position == position else { return -pixelLimit }
        return Int(min(max(position, -Double(pixelLimit)), Double(pixelLimit)))
    }

    /// Far beyond the largest bitmap (3,072 pixels), small enough that `±1` and products stay in range.
    static let pixelLimit = 1 << 20
}
