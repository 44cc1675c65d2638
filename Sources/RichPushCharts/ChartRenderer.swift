// The renderer lands with the charts issue.
import RichPushCore

