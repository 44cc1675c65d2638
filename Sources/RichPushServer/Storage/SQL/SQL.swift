import Foundation
import GRDB
import PostgresNIO

/// A statement, or a piece of one, written once for both databases. Values go in by interpolation and never into
/// the text: SQLite gets `?` placeholders with GRDB arguments, PostgreSQL a query built through postgres-nio's own
/// interpolation (which numbers the `$n` binds). Pieces join with `+` or by interpolating one into another.
///
/// ```swift
/// let f = AudienceFilter(.tag("vip"), appID: app)!
/// let q: SQL = "SELECT count(*) FROM \(f.from) WHERE \(f.condition) AND d.id > \(cursor)"
/// try await db.rows(q.postgres)            // PostgreSQL
/// try Int.fetchOne(db, query: q)         // SQLite
/// ```
public struct SQL: Sendable, ExpressibleByStringInterpolation, CustomStringConvertible {
    /// A value bound to a placeholder.
    public enum Value: Sendable, Hashable {
        case text(String)
        case integer(Int64)
        case real(Double)
        /// A time: seconds since 1970 in SQLite (a REAL column), a `timestamptz` in PostgreSQL.
        case date(Date)
        case null
        /// A null where a whole number goes (PostgreSQL is told its type: a text null does not go into a bigint).
        case nullInteger
    }

    enum Part: Sendable, Hashable {
        case text(String)
        case value(Value)
    }

    var parts: [Part]

    public init(stringLiteral value: String) { parts = [.text(value)] }
    public init(stringInterpolation: StringInterpolation) { parts = stringInterpolation.parts }

    public struct StringInterpolation: StringInterpolationProtocol {
        var parts: [Part] = []
        public init(literalCapacity: Int, interpolationCount: Int) {}
        public mutating func appendLiteral(_ literal: String) { parts.append(.text(literal)) }
        public mutating func appendInterpolation(_ value: String) { parts.append(.value(.text(value))) }
        public mutating func appendInterpolation(_ value: String?) {
            parts.append(.value(value.map(Value.text) ?? .null))
        }
        public mutating func appendInterpolation(_ value: Int64) { parts.append(.value(.integer(value))) }
        public mutating func appendInterpolation(_ value: Int) { parts.append(.value(.integer(Int64(value)))) }
        public mutating func appendInterpolation(_ value: Int64?) {
            parts.append(.value(value.map(Value.integer) ?? .nullInteger))
        }
        public mutating func appendInterpolation(_ value: Double) { parts.append(.value(.real(value))) }
        public mutating func appendInterpolation(_ value: Double?) {
            parts.append(.value(value.map(Value.real) ?? .null))
        }
        public mutating func appendInterpolation(_ value: Date) { parts.append(.value(.date(value))) }
        public mutating func appendInterpolation(_ value: Date?) {
            parts.append(.value(value.map(Value.date) ?? .null))
        }
        /// A piece of SQL, values and all.
        public mutating func appendInterpolation(_ piece: SQL) { parts += piece.parts }
        /// Text of the program's own (a column list, a table name): never a value from outside.
        public mutating func appendInterpolation(unescaped text: String) { parts.append(.text(text)) }
    }

    public static func + (a: SQL, b: SQL) -> SQL {
        var out = a
        out.parts += b.parts
        return out
    }

    /// The text with `?` for each value (as SQLite takes it), for logs and tests.
    public var description: String {
        parts.map {
            if case .text(let t) = $0 { return t }
            return "?"
        }.joined()
    }

    /// For SQLite: `?` placeholders and the values in order.
    public var sqlite: (sql: String, arguments: StatementArguments) {
        var values: [DatabaseValue] = []
        for case .value(let v) in parts {
            switch v {
            case .text(let s): values.append(s.databaseValue)
            case .integer(let i): values.append(i.databaseValue)
            case .real(let d): values.append(d.databaseValue)
            case .date(let d): values.append(d.timeIntervalSince1970.databaseValue)
            case .null, .nullInteger: values.append(.null)
            }
        }
        return (description, StatementArguments(values))
    }

    /// For PostgreSQL, through postgres-nio's interpolation.
    public var postgres: PostgresQuery {
        var q = PostgresQuery.StringInterpolation(literalCapacity: 0, interpolationCount: parts.count)
        for part in parts {
            switch part {
            case .text(let t): q.appendLiteral(t)
            case .value(.text(let s)): q.appendInterpolation(s)
            case .value(.integer(let i)): q.appendInterpolation(i)
            case .value(.real(let d)): q.appendInterpolation(d)
            case .value(.date(let d)): q.appendInterpolation(d)
            case .value(.null): q.appendInterpolation(String?.none)
            case .value(.nullInteger): q.appendInterpolation(Int64?.none)
            }
        }
        return PostgresQuery(stringInterpolation: q)
    }
}

extension Array {
    /// These values with the last repeated up to the next power of two (1,024 at most; a longer list is as it is):
    /// a statement that names them in `IN (…)` then takes one of a few shapes whatever the count, and a connection
    /// can keep its compiled statement (a repeated value changes nothing in `IN`). Compiling the claim's two
    /// statements over 500 ids each, on every claim, was about 3 % of a delivering node's CPU.
    func paddedForIN() -> [Element] {
        guard let last, count < 1_024 else { return self }
        var size = 1
        while size < count { size *= 2 }
        return self + repeatElement(last, count: size - count)
    }
}

extension Row {
    /// The rows of a statement written as ``SQL``.
    static func fetchAll(_ db: Database, query sql: SQL) throws -> [Row] {
        let (text, arguments) = sql.sqlite
        return try fetchAll(db, sql: text, arguments: arguments)
    }

    /// Each row of a statement written as ``SQL``, read in place (no copy of the row) into `decode`'s value; the
    /// statement compiled once per connection and kept. Only for statements whose text takes a few shapes whatever
    /// the values (the connection keeps one compiled statement per text, for good): a hot path's statement was
    /// compiled on every call (a webhook sender's lease, 1.2 % of a delivering node's CPU in compiling alone).
    static func fetchAll<T>(_ db: Database, kept sql: SQL, _ decode: (Row) throws -> T) throws -> [T] {
        let (text, arguments) = sql.sqlite
        let rows = try Row.fetchCursor(db.cachedStatement(sql: text), arguments: arguments)
        var out: [T] = []
        while let row = try rows.next() { out.append(try decode(row)) }
        return out
    }
}

extension DatabaseValueConvertible {
    /// The first column of the first row of a statement written as ``SQL``.
    static func fetchOne(_ db: Database, query sql: SQL) throws -> Self? {
        let (text, arguments) = sql.sqlite
        return try fetchOne(db, sql: text, arguments: arguments)
    }
}

extension Database {
    func execute(query sql: SQL) throws {
        let (text, arguments) = sql.sqlite
        try execute(sql: text, arguments: arguments)
    }

    /// ``execute(query:)`` through a statement compiled once per connection and kept (see
    /// ``GRDB/Row/fetchAll(_:kept:_:)``: only for texts of a few shapes).
    func execute(kept sql: SQL) throws {
        let (text, arguments) = sql.sqlite
        try cachedStatement(sql: text).execute(arguments: arguments)
    }
}
