import NIOHTTP2
import NIOSSL
import Crypto
import _CryptoExtras
