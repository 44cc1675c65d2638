import RichPushCore

/// One glyph of the built-in font: its advance and its strokes as flat x,y lists in font units.
struct StrokeGlyph: Sendable {
    let width: Double
    let strokes: [[Double]]
}

/// The built-in monoline font: digits, Latin letters, punctuation, currency signs and arrows, drawn as
/// round-capped strokes, so that text needs no font file and looks the same on every platform.
///
/// Font units: baseline 0, x-height 7, cap height 10, descender -3. One em is 10 / 0.7 units.
public enum StrokeFont {
    public enum Weight: Sendable {
        case regular, bold

        /// Stroke width as a fraction of the font size.
        var strokeFraction: Double { self == .bold ? 0.13 : 0.085 }
    }

    static let unitsPerEm = 10 / 0.7
    /// Space between glyphs, in font units, on top of the stroke width.
    static let tracking = 1.4
    /// Drawn for characters the font lacks: an outlined box.
    static let missing = StrokeGlyph(width: 5, strokes: [[0, 0, 5, 0, 5, 10, 0, 10, 0, 0]])

    static func glyph(for scalar: Unicode.Scalar) -> StrokeGlyph {
        glyphs[scalar.value] ?? (scalar.properties.isWhitespace ? glyphs[0x20]! : missing)
    }

    /// Width of `text` in pixels at `size` pixels per em.
    public static func width(of text: String, size: Double, weight: Weight = .regular) -> Double {
        let unit = size / unitsPerEm
        let stroke = size * weight.strokeFraction
        var w = 0.0
        var first = true
        for s in text.unicodeScalars {
            if !first { w += (tracking * unit + stroke) }
            w += glyph(for: s).width * unit
            first = false
        }
        return text.isEmpty ? 0 : w + stroke
    }

    /// The pixel paths of `text` whose left edge is at `x` and baseline at `baseline`.
    static func paths(
        for text: String,
        x: Double,
        baseline: Double,
        size: Double,
        weight: Weight
    ) -> [[(Double, Double)]] {
        let unit = size / unitsPerEm
        let stroke = size * weight.strokeFraction
        var pen = x + stroke / 2
        var paths: [[(Double, Double)]] = []
        for s in text.unicodeScalars {
            let g = glyph(for: s)
            for flat in g.strokes {
                var path: [(Double, Double)] = []
                path.reserveCapacity(flat.count / 2)
                var i = 0
                while i + 1 < flat.count {
                    path.append((pen + flat[i] * unit, baseline - flat[i + 1] * unit))
                    i += 2
                }
                paths.append(path)
            }
            pen += g.width * unit + tracking * unit + stroke
        }
        return paths
    }
}

extension Bitmap {
    public enum TextAlignment: Sendable { case left, right, center }

    /// Draws one line of text; returns its width in pixels.
    @discardableResult
    mutating func draw(
        text: String,
        x: Double,
        baseline: Double,
        size: Double,
        weight: StrokeFont.Weight = .regular,
        align: TextAlignment = .left,
        color: RGBAColor
    ) -> Double {
        let w = StrokeFont.width(of: text, size: size, weight: weight)
        let left: Double
        switch align {
        case .left: left = x
        case .right: left = x - w
        case .center: left = x - w / 2
        }
        stroke(
            paths: StrokeFont.paths(for: text, x: left, baseline: baseline, size: size, weight: weight),
            lineWidth: size * weight.strokeFraction,
            color: color
        )
        return w
    }
}
