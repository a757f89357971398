// Run by scripts/test-swift where a Swift toolchain exists, against `mqstate serve` started by
// the script (its URL in MQSTATE_URL).
import Foundation
import XCTest
@testable import Mqstate

final class ClientTests: XCTestCase {
    func url() throws -> String {
        guard let url = ProcessInfo.processInfo.environment["MQSTATE_URL"] else {
            throw XCTSkip("MQSTATE_URL is not set: run scripts/test-swift")
        }
        return url
    }

    func testSetGetDelAndErrors() async throws {
        let client = try await Client.connect(options: ConnectOptions(url: try url()))
        let key = Data("swift/\(UUID().uuidString)".utf8)
        let set = try await client.set(key: key, value: Data([0, 1, 255]))
        XCTAssertTrue(set.applied)
        let got = try await client.get(key: key)
        XCTAssertEqual(got?.value, Data([0, 1, 255]))
        XCTAssertEqual(got?.version, set.version)
        let deleted = try await client.del(key: key)
        XCTAssertEqual(deleted, 1)
        do {
            _ = try await client.get(key: Data())
            XCTFail("an empty key must be refused")
        } catch let e as MqstateError {
            XCTAssertEqual(e.kind(), "invalid_argument")
        }
        try await client.close()
    }
}
