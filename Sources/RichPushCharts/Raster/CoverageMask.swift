import RichPushCore

/// Anti-aliased coverage (0...255) over a rectangle of pixels, combined by maximum.
///
/// Shapes drawn into one mask and composited once never darken where they overlap: the joints of a
/// polyline and the strokes of a glyph blend as one shape.
struct CoverageMask {
    let x0: Int, y0: Int, width: Int, height: Int
    var values: [UInt8]

    init?(minX: Double, minY: Double, maxX: Double, maxY: Double, clipWidth: Int, clipHeight: Int) {
        guard minX.isFinite, minY.isFinite, maxX.isFinite, maxY.isFinite else { return nil }
        let ax = max(0, Bitmap.pixel((minX).rounded(.down)))
        let ay = max(0, Bitmap.pixel((minY).rounded(.down)))
        let bx = min(clipWidth, Bitmap.pixel((maxX).rounded(.up)) + 1)
        let by = min(clipHeight, Bitmap.pixel((maxY).rounded(.up)) + 1)
        guard bx > ax, by > ay else { return nil }
        x0 = ax
        y0 = ay
        width = bx - ax
        height = by - ay
        values = [UInt8](repeating: 0, count: width * height)
    }

    /// Adds a round-capped segment of half-width `r` (pixels); joints come out round as a result.
    mutating func addSegment(_ ax: Double, _ ay: Double, _ bx: Double, _ by: Double, radius r: Double) {
        guard ax.isFinite, ay.isFinite, bx.isFinite, by.isFinite, r.isFinite, r >= 0 else { return }
        let reach = r + 0.5
        let minX = max(x0, Bitmap.pixel((min(ax, bx) - reach).rounded(.down)))
        let maxX = min(x0 + width - 1, Bitmap.pixel((max(ax, bx) + reach).rounded(.up)))
        let minY = max(y0, Bitmap.pixel((min(ay, by) - reach).rounded(.down)))
        let maxY = min(y0 + height - 1, Bitmap.pixel((max(ay, by) + reach).rounded(.up)))
        guard minX <= maxX, minY <= maxY else { return }
        let dx = bx - ax
        let dy = by - ay
        let len2 = dx * dx + dy * dy
        let reach2 = reach * reach
        values.withUnsafeMutableBufferPointer { v in
            for py in minY...maxY {
                let cy = Double(py) + 0.5
                let row = (py - y0) * width - x0
                for px in minX...maxX {
                    let cx = Double(px) + 0.5
                    var t = len2 > 0 ? ((cx - ax) * dx + (cy - ay) * dy) / len2 : 0
                    t = t < 0 ? 0 : (t > 1 ? 1 : t)
                    let ex = ax + t * dx - cx
                    let ey = ay + t * dy - cy
                    let d2 = ex * ex + ey * ey
                    if !(d2 < reach2) { continue }  // also skips NaN from extreme coordinates
                    let cov = reach - d2.squareRoot()
                    let c = cov >= 1 ? 255 : UInt8((cov * 255).rounded())
                    if c > v[row + px] { v[row + px] = c }
                }
            }
        }
    }

    /// Composites the mask onto the bitmap in one colour.
    func draw(on bitmap: inout Bitmap, color: RGBAColor) {
        values.withUnsafeBufferPointer { v in
            for row in 0..<height {
                bitmap.blend(
                    row: y0 + row,
                    x0: x0,
                    coverage: UnsafeBufferPointer(rebasing: v[(row * width)..<(row * width + width)]),
                    color: color
                )
            }
        }
    }
}
