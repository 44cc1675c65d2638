import X509
import SwiftASN1
