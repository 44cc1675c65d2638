// libFuzzer harness: raw bytes as a received payload, through everything the service extension runs on it
// before the network: the JSON parser (as the simulator reads a payload), the decoder of every provider's keys
// (their media URLs read by MediaURL; Scripts/fuzz-device mutates them with Fuzz/urls.dict),
// the chart spec, and the chart renderer with its PNG encoder; and the same bytes as a Live Activity's content state,
// decoded by Foundation's JSONDecoder into a widget's chart. Built by Scripts/fuzz-device.
import Foundation
import RichPushCharts
import RichPushCore

/// A widget's content state holding our chart, as an app declares it.
struct LiveState: Decodable {
    var chart: LiveActivityChart?
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzDevicePayload(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: data, count: size)
    // On the device, ActivityKit hands the content state to JSONDecoder: a chart decodes to points in the unit
    // square, or to an error the widget skips.
    if let state = try? JSONDecoder().decode(LiveState.self, from: Data(bytes)), let chart = state.chart {
        precondition(chart.yRange.lowerBound <= chart.yRange.upperBound, "a chart's y range is ordered")
        for line in chart.points {
            for p in line {
                precondition((0...1).contains(p.x) && (0...1).contains(p.y), "points stay in the unit square")
            }
        }
    }
    guard let payload = try? JSONValue.parse(bytes, deepValues: .readAsNull) else { return 0 }
    // The payload as the system hands it over (a Foundation dictionary), and as JSON.
    let viaFoundation = ReceivedPayloadDecoder.decode(userInfo: (payload.foundationValue as? [AnyHashable: Any]) ?? [:])
    let content = ReceivedPayloadDecoder.decode(payload)
    for chart in [content.chart, viaFoundation.chart].compactMap({ $0 }) {
        // Drawn at scale 1 to keep runs fast; the budget and the clamps are the same at every scale.
        let rendered = ChartRenderer.render(chart, scale: 1)
        precondition(rendered.png.count > 8, "a chart always gives a PNG")
    }
    // Any chart-shaped object, even one the decoder refused, must draw without a trap.
    if case .object(let o) = payload, let c = o["chart"], let spec = try? ChartSpec.decode(c) {
        _ = ChartRenderer.render(spec, scale: 1)
    }
    _ = content.media.map { $0.hintedType }
    // Every media URL the decoder kept is fetched in a form that reads back as itself (the same rules as the server).
    for m in content.media + viaFoundation.media {
        precondition((try? MediaURL(m.fetched))?.fetched == m.fetched, "a kept media URL is fetched as it normalizes")
    }
    return 0
}
