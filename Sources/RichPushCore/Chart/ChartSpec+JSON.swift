extension ChartSpec {
    /// The fields a chart spec may have.
    public static let knownKeys: Set<String> = [
        "type", "series", "values", "title", "value", "change", "trend", "labels", "y", "size", "scale", "theme",
        "colors", "grid", "line_width", "gradient", "color",
    ]

    /// Reads a chart from its JSON form, recording every problem in `reader`.
    ///
    /// A chart with one series may give `values` (and `color`) at the top level instead of `series`.
    static func read(_ value: JSONValue, at path: String, into reader: inout FieldReader) -> ChartSpec? {
        guard let o = reader.object(value, at: path) else { return nil }
        reader.rejectUnknown(o, known: knownKeys, at: path)
        var spec = ChartSpec(series: [])
        let before = reader.report.errors.count

        if let t = reader.string(o, "type", at: path) {
            if let k = Kind(rawValue: t) {
                spec.kind = k
            } else {
                reader.report.add(FieldReader.join(path, "type"), "enum", "must be one of line, area, bar, sparkline")
            }
        }
        spec.series = readSeries(o, at: path, into: &reader)
        spec.title = reader.string(o, "title", at: path)
        spec.value = reader.string(o, "value", at: path)
        spec.change = reader.string(o, "change", at: path)
        if let t = reader.string(o, "trend", at: path) {
            if let tr = Trend(rawValue: t) {
                spec.trend = tr
            } else {
                reader.report.add(FieldReader.join(path, "trend"), "enum", "must be one of up, down, flat")
            }
        }
        readLook(o, at: path, into: &spec, &reader)

        reader.report.merge(spec.validate(at: path))
        return reader.report.errors.count == before ? spec : nil
    }

    /// `series`, or one series as `values` (and `color`) at the top level.
    private static func readSeries(
        _ o: [String: JSONValue],
        at path: String,
        into reader: inout FieldReader
    ) -> [Series] {
        var series: [Series] = []
        if let seriesValue = reader.present(o["series"], at: FieldReader.join(path, "series")) {
            if case .array(let list) = seriesValue {
                for (i, element) in list.enumerated() {
                    let p = "\(FieldReader.join(path, "series"))[\(i)]"
                    if case .array = element {
                        series.append(Series(values: readValues(element, at: p, into: &reader)))
                    } else if let so = reader.object(element, at: p) {
                        reader.rejectUnknown(so, known: ["values", "color", "name"], at: p)
                        let values =
                            so["values"].map { readValues($0, at: FieldReader.join(p, "values"), into: &reader) } ?? []
                        if so["values"] == nil {
                            reader.report.add(FieldReader.join(p, "values"), "required", "a series needs values")
                        }
                        series.append(
                            Series(
                                values: values,
                                color: readColor(so, "color", at: p, into: &reader),
                                name: reader.string(so, "name", at: p)
                            )
                        )
                    }
                }
            } else {
                reader.report.add(
                    FieldReader.join(path, "series"),
                    "type",
                    "expected an array, found \(seriesValue.typeName)"
                )
            }
        }
        if o["values"] != nil && o["series"] != nil {
            reader.report.add(
                FieldReader.join(path, "values"),
                "exclusive",
                "give values (one series) or series, not both"
            )
        }
        if let values = reader.present(o["values"], at: FieldReader.join(path, "values")) {
            series.append(
                Series(
                    values: readValues(values, at: FieldReader.join(path, "values"), into: &reader),
                    color: readColor(o, "color", at: path, into: &reader)
                )
            )
        }
        return series
    }

    /// How it is drawn: labels, the y range, the size and scale, the theme and colors, the grid, the line.
    private static func readLook(
        _ o: [String: JSONValue],
        at path: String,
        into spec: inout ChartSpec,
        _ reader: inout FieldReader
    ) {
        spec.labels = reader.strings(o, "labels", at: path) ?? []
        if let y = reader.present(o["y"], at: FieldReader.join(path, "y")) {
            if case .array(let a) = y, a.count == 2, let lo = a[0].doubleValue, let hi = a[1].doubleValue {
                spec.yMin = lo
                spec.yMax = hi
            } else {
                reader.report.add(FieldReader.join(path, "y"), "type", "expected [min, max]")
            }
        }
        if let size = reader.present(o["size"], at: FieldReader.join(path, "size")) {
            if case .array(let a) = size, a.count == 2, let w = a[0].intValue, let h = a[1].intValue {
                spec.width = Int(clamping: w)
                spec.height = Int(clamping: h)
            } else {
                reader.report.add(FieldReader.join(path, "size"), "type", "expected [width, height] in whole points")
            }
        }
        if let s = reader.int(o, "scale", at: path) { spec.scale = Int(clamping: s) }
        if let t = reader.string(o, "theme", at: path) {
            if let th = Theme(rawValue: t) {
                spec.theme = th
            } else {
                reader.report.add(FieldReader.join(path, "theme"), "enum", "must be light or dark")
            }
        }
        if let c = reader.object(o["colors"], at: FieldReader.join(path, "colors")) {
            let p = FieldReader.join(path, "colors")
            reader.rejectUnknown(c, known: ["background", "text", "grid", "up", "down"], at: p)
            spec.colors = Colors(
                background: readColor(c, "background", at: p, into: &reader),
                text: readColor(c, "text", at: p, into: &reader),
                grid: readColor(c, "grid", at: p, into: &reader),
                up: readColor(c, "up", at: p, into: &reader),
                down: readColor(c, "down", at: p, into: &reader)
            )
        }
        if let g = reader.int(o, "grid", at: path) { spec.gridLines = Int(clamping: g) }
        if let w = reader.double(o, "line_width", at: path) { spec.lineWidth = w }
        if let g = reader.bool(o, "gradient", at: path) { spec.gradient = g }
    }

    private static func readValues(_ value: JSONValue, at path: String, into reader: inout FieldReader) -> [Double] {
        guard case .array(let a) = value else {
            reader.report.add(path, "type", "expected an array of numbers, found \(value.typeName)")
            return []
        }
        var out: [Double] = []
        out.reserveCapacity(a.count)
        for (i, v) in a.enumerated() {
            if let d = v.doubleValue {
                out.append(d)
            } else if v.isNull {
                out.append(.nan)  // a gap in the line
            } else {
                reader.report.add("\(path)[\(i)]", "type", "expected a number or null, found \(v.typeName)")
            }
        }
        return out
    }

    private static func readColor(
        _ o: [String: JSONValue],
        _ key: String,
        at path: String,
        into reader: inout FieldReader
    ) -> RGBAColor? {
        guard let s = reader.string(o, key, at: path) else { return nil }
        guard let c = RGBAColor(hex: s) else {
            reader.report.add(FieldReader.join(path, key), "color", "expected #RGB, #RRGGBB or #RRGGBBAA")
            return nil
        }
        return c
    }

    /// Rules a chart must meet whichever way it was built.
    public func validate(at path: String = "chart") -> ValidationReport {
        var r = ValidationReport()
        let j = { (k: String) in FieldReader.join(path, k) }
        if series.isEmpty { r.add(j("series"), "required", "a chart needs at least one series of values") }
        if series.count > Self.maxSeries { r.add(j("series"), "max-series", "at most \(Self.maxSeries) series") }
        for (i, s) in series.enumerated() {
            if s.values.filter({ !$0.isNaN }).isEmpty {
                r.add("\(j("series"))[\(i)].values", "empty", "a series needs at least one number")
            }
            if s.values.count > Self.maxValuesPerSeries {
                r.add(
                    "\(j("series"))[\(i)].values",
                    "max-values",
                    "at most \(Self.maxValuesPerSeries) values per series"
                )
            }
            if s.values.contains(where: { !$0.isNaN && !Self.isPlaceable($0) }) {
                r.add("\(j("series"))[\(i)].values", "range", "values must be finite and within ±1e15")
            }
        }
        if !Self.sizeRange.contains(width) || !Self.sizeRange.contains(height) {
            r.add(
                j("size"),
                "range",
                "width and height must be \(Self.sizeRange.lowerBound)...\(Self.sizeRange.upperBound) points"
            )
        }
        if ![1, 2, 3].contains(scale) { r.add(j("scale"), "enum", "scale must be 1, 2 or 3") }
        if let lo = yMin, let hi = yMax, !(lo < hi) || !Self.isPlaceable(lo) || !Self.isPlaceable(hi) {
            r.add(j("y"), "range", "y must be [min, max] with min < max, both within ±1e15")
        }
        let drawn = Self.drawnScale(width: width, height: height, requested: scale)
        if drawn < scale, Self.sizeRange.contains(width), Self.sizeRange.contains(height) {
            r.add(
                j("scale"),
                "pixel-budget",
                "drawn at scale \(drawn): \(width)x\(height) points at scale \(scale) would "
                    + "exceed the device's \(Self.maxPixels) pixels",
                .warning
            )
        }
        if !Self.gridRange.contains(gridLines) {
            r.add(j("grid"), "range", "grid must be \(Self.gridRange.lowerBound)...\(Self.gridRange.upperBound) lines")
        }
        if !(lineWidth > 0 && lineWidth <= Self.maxLineWidth) {
            r.add(j("line_width"), "range", "line_width must be more than 0 and at most \(Int(Self.maxLineWidth))")
        }
        if labels.count > Self.maxLabels { r.add(j("labels"), "max-labels", "at most \(Self.maxLabels) labels") }
        return r
    }

    /// The compact JSON form that travels in payloads; defaults are left out.
    public var json: JSONValue {
        var o: [String: JSONValue] = [:]
        if kind != .line { o["type"] = .string(kind.rawValue) }
        if series.count == 1, series[0].name == nil {
            o["values"] = .array(series[0].values.map(Self.number))
            if let c = series[0].color { o["color"] = .string(c.description) }
        } else {
            o["series"] = .array(
                series.map { s in
                    var so: [String: JSONValue] = ["values": .array(s.values.map(Self.number))]
                    if let c = s.color { so["color"] = .string(c.description) }
                    if let n = s.name { so["name"] = .string(n) }
                    return .object(so)
                }
            )
        }
        if let title { o["title"] = .string(title) }
        if let value { o["value"] = .string(value) }
        if let change { o["change"] = .string(change) }
        if let trend { o["trend"] = .string(trend.rawValue) }
        if !labels.isEmpty { o["labels"] = .array(labels.map(JSONValue.string)) }
        if let yMin, let yMax { o["y"] = [.double(yMin), .double(yMax)] }
        if width != Self.defaultWidth || height != Self.defaultHeight {
            o["size"] = [.int(Int64(width)), .int(Int64(height))]
        }
        if scale != 2 { o["scale"] = .int(Int64(scale)) }
        if theme != .light { o["theme"] = .string(theme.rawValue) }
        if let colors {
            var c: [String: JSONValue] = [:]
            if let v = colors.background { c["background"] = .string(v.description) }
            if let v = colors.text { c["text"] = .string(v.description) }
            if let v = colors.grid { c["grid"] = .string(v.description) }
            if let v = colors.up { c["up"] = .string(v.description) }
            if let v = colors.down { c["down"] = .string(v.description) }
            if !c.isEmpty { o["colors"] = .object(c) }
        }
        if gridLines != 3 { o["grid"] = .int(Int64(gridLines)) }
        if lineWidth != 2 { o["line_width"] = .double(lineWidth) }
        if !gradient { o["gradient"] = .bool(false) }
        return .object(o)
    }

    private static func number(_ d: Double) -> JSONValue { d.isNaN ? .null : .double(d) }

    /// Reads a chart from JSON, throwing every problem at once.
    public static func decode(_ value: JSONValue) throws(ValidationReport) -> ChartSpec {
        var reader = FieldReader()
        let spec = read(value, at: "", into: &reader)
        guard let spec, reader.report.isValid else { throw reader.report }
        return spec
    }
}
