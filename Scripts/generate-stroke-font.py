#!/usr/bin/env python3
"""Generates Sources/RichPushCharts/Text/StrokeFont+Glyphs.swift, the built-in monoline font.

Glyphs are polylines in font units: baseline 0, x-height 7, cap height 10, descender -3. Curves are written
as elliptical arcs here and flattened to points, so the Swift side needs no trigonometry at run time (which
keeps rendering bit-identical across platforms). Run it again after editing a glyph.
"""
import math, os

def arc(cx, cy, rx, ry, a0, a1, step=12):
    n = max(2, int(abs(a1 - a0) / step) + 1)
    return [(cx + rx * math.cos(math.radians(a0 + (a1 - a0) * i / (n - 1))),
             cy + ry * math.sin(math.radians(a0 + (a1 - a0) * i / (n - 1)))) for i in range(n)]

def S(*parts):
    """One stroke from points and arcs, in order."""
    pts = []
    for p in parts:
        if isinstance(p, list):
            pts.extend(p)
        else:
            pts.append(p)
    return pts

def L(*pts):
    return list(pts)

def dot(x, y):
    return [(x, y), (x, y + 0.05)]

def ring(cx, cy, rx, ry, start=90):
    return arc(cx, cy, rx, ry, start, start + 360)

G = {}
def glyph(ch, width, *strokes):
    G[ch] = (width, [s for s in strokes])

# Digits share one width so that figures line up in columns.
glyph('0', 6, ring(3, 5, 3, 5))
glyph('1', 6, L((0.8, 8), (3.4, 10), (3.4, 0)))
glyph('2', 6, S(arc(3, 7, 3, 3, 160, -35), (0, 0), (6, 0)))
glyph('3', 6, S(arc(3, 7.5, 2.8, 2.5, 150, -90), arc(3, 2.7, 3, 2.7, 90, -150)))
glyph('4', 6, L((4.6, 0), (4.6, 10), (0, 3), (6.3, 3)))
glyph('5', 6, S((5.6, 10), (0.9, 10), (0.5, 5.5), arc(3, 3.1, 3, 3.1, 128, -145)))
glyph('6', 6, S(arc(3, 5, 3, 5, 60, 180), (0, 3), arc(3, 3, 3, 3, 180, -180)))
glyph('7', 6, L((0, 10), (6, 10), (2, 0)))
glyph('8', 6, ring(3, 7.6, 2.6, 2.4), ring(3, 2.7, 3, 2.7))
glyph('9', 6, S(arc(3, 5, 3, 5, -120, 0), (6, 7), arc(3, 7, 3, 3, 0, 360)))

glyph('A', 7, L((0, 0), (3.5, 10), (7, 0)), L((1.3, 3.5), (5.7, 3.5)))
glyph('B', 6.2, S((0, 5), (0, 10), (3.5, 10), arc(3.5, 7.5, 2.5, 2.5, 90, -90), (0, 5)), S((3.5, 5), arc(3.6, 2.5, 2.6, 2.5, 90, -90), (0, 0), (0, 5)))
glyph('C', 7, arc(3.9, 5, 3.9, 5, 42, 318))
glyph('D', 7, S((0, 0), (0, 10), (2.5, 10), arc(2.5, 5, 4.5, 5, 90, -90), (0, 0)))
glyph('E', 6, L((6, 10), (0, 10), (0, 0), (6, 0)), L((0, 5), (5, 5)))
glyph('F', 6, L((6, 10), (0, 10), (0, 0)), L((0, 5), (5, 5)))
glyph('G', 7.4, S(arc(3.9, 5, 3.9, 5, 45, 360), (7.8, 4.6), (4.4, 4.6)))
glyph('H', 7, L((0, 0), (0, 10)), L((7, 0), (7, 10)), L((0, 5), (7, 5)))
glyph('I', 0, L((0, 0), (0, 10)))
glyph('J', 5, S((5, 10), (5, 3), arc(2.5, 3, 2.5, 3, 0, -180)))
glyph('K', 6.5, L((0, 0), (0, 10)), L((6.2, 10), (0, 3.6)), L((2.1, 5.8), (6.5, 0)))
glyph('L', 5.5, L((0, 10), (0, 0), (5.5, 0)))
glyph('M', 8, L((0, 0), (0, 10), (4, 2), (8, 10), (8, 0)))
glyph('N', 7, L((0, 0), (0, 10), (7, 0), (7, 10)))
glyph('O', 8, ring(4, 5, 4, 5))
glyph('P', 6.2, S((0, 0), (0, 10), (3.5, 10), arc(3.5, 7.25, 2.7, 2.75, 90, -90), (0, 4.5)))
glyph('Q', 8, ring(4, 5, 4, 5), L((4.9, 2.4), (8, -0.6)))
glyph('R', 6.5, S((0, 0), (0, 10), (3.5, 10), arc(3.5, 7.25, 2.7, 2.75, 90, -90), (0, 4.5)), L((3.2, 4.5), (6.5, 0)))
glyph('S', 6.4, S(arc(3.2, 7.5, 3, 2.5, 25, 270), arc(3.2, 2.5, 3.2, 2.5, 90, -155)))
glyph('T', 7, L((0, 10), (7, 10)), L((3.5, 10), (3.5, 0)))
glyph('U', 6.6, S((0, 10), (0, 3.4), arc(3.3, 3.4, 3.3, 3.4, 180, 360), (6.6, 10)))
glyph('V', 7, L((0, 10), (3.5, 0), (7, 10)))
glyph('W', 9.4, L((0, 10), (2.3, 0), (4.7, 8.5), (7.1, 0), (9.4, 10)))
glyph('X', 6.6, L((0, 10), (6.6, 0)), L((6.6, 10), (0, 0)))
glyph('Y', 7, L((0, 10), (3.5, 5), (7, 10)), L((3.5, 5), (3.5, 0)))
glyph('Z', 6.6, L((0, 10), (6.6, 10), (0, 0), (6.6, 0)))

glyph('a', 6, ring(3, 3.5, 3, 3.5), L((6, 7), (6, 0)))
glyph('b', 6, L((0, 10), (0, 0)), ring(3, 3.5, 3, 3.5, 180))
glyph('c', 5.8, arc(3.2, 3.5, 3.2, 3.5, 45, 315))
glyph('d', 6, ring(3, 3.5, 3, 3.5), L((6, 10), (6, 0)))
glyph('e', 6, S((0.05, 3.6), (6, 3.6), arc(3, 3.5, 3, 3.5, 2, 318)))
glyph('f', 4.4, S((4.6, 9.6), arc(3.3, 8.4, 1.6, 1.6, 50, 180), (1.7, 0)), L((0, 7), (4.2, 7)))
glyph('g', 6, ring(3, 3.5, 3, 3.5), S((6, 7), (6, -0.6), arc(3, -0.6, 3, 2.4, 0, -165)))
glyph('h', 6, L((0, 10), (0, 0)), S((0, 4.4), arc(3, 4.4, 3, 2.6, 180, 0), (6, 0)))
glyph('i', 0, L((0, 7), (0, 0)), dot(0, 9.5))
glyph('j', 1.6, S((1.6, 7), (1.6, -1.4), arc(0, -1.4, 1.6, 1.6, 0, -150)), dot(1.6, 9.5))
glyph('k', 5.2, L((0, 10), (0, 0)), L((5, 7), (0, 2.5)), L((1.7, 4), (5.2, 0)))
glyph('l', 0, L((0, 10), (0, 0)))
glyph('m', 9, L((0, 7), (0, 0)), S((0, 4.4), arc(2.25, 4.4, 2.25, 2.6, 180, 0), (4.5, 0)), S((4.5, 4.4), arc(6.75, 4.4, 2.25, 2.6, 180, 0), (9, 0)))
glyph('n', 6, L((0, 7), (0, 0)), S((0, 4.4), arc(3, 4.4, 3, 2.6, 180, 0), (6, 0)))
glyph('o', 6.4, ring(3.2, 3.5, 3.2, 3.5))
glyph('p', 6, L((0, 7), (0, -3)), ring(3, 3.5, 3, 3.5, 180))
glyph('q', 6, ring(3, 3.5, 3, 3.5), L((6, 7), (6, -3)))
glyph('r', 4.4, L((0, 7), (0, 0)), S((0, 3.8), arc(3.1, 3.8, 3.1, 3, 180, 70)))
glyph('s', 5.4, S(arc(2.7, 5.25, 2.5, 1.75, 15, 270), arc(2.7, 1.75, 2.7, 1.75, 90, -165)))
glyph('t', 4.4, S((1.4, 9.4), (1.4, 1.6), arc(3.1, 1.6, 1.7, 1.6, 180, 300)), L((0, 7), (4.2, 7)))
glyph('u', 6, S((0, 7), (0, 2.8), arc(3, 2.8, 3, 2.8, 180, 360)), L((6, 7), (6, 0)))
glyph('v', 6, L((0, 7), (3, 0), (6, 7)))
glyph('w', 8.4, L((0, 7), (2.1, 0), (4.2, 6), (6.3, 0), (8.4, 7)))
glyph('x', 5.6, L((0, 7), (5.6, 0)), L((5.6, 7), (0, 0)))
glyph('y', 6, L((0, 7), (3.1, 0.2)), L((6, 7), (1.6, -3)))
glyph('z', 5.6, L((0, 7), (5.6, 7), (0, 0), (5.6, 0)))

glyph(' ', 2.2)
glyph('.', 0, dot(0, 0))
glyph(',', 0.6, L((0.6, 0.4), (-0.5, -2)))
glyph(':', 0, dot(0, 0), dot(0, 6.4))
glyph(';', 0.6, dot(0.6, 6.4), L((0.6, 0.4), (-0.5, -2)))
glyph('!', 0, L((0, 10), (0, 3.2)), dot(0, 0))
glyph('?', 5.6, S(arc(2.8, 7.5, 2.8, 2.5, 160, -60), (2.8, 4.2), (2.8, 2.8)), dot(2.8, 0))
glyph("'", 0, L((0, 10), (0, 7.4)))
glyph('"', 1.8, L((0, 10), (0, 7.4)), L((1.8, 10), (1.8, 7.4)))
glyph('-', 3.6, L((0, 4), (3.6, 4)))
glyph('\u2013', 5.4, L((0, 4), (5.4, 4)))
glyph('\u2212', 5, L((0, 4.5), (5, 4.5)))
glyph('+', 5, L((0, 4.5), (5, 4.5)), L((2.5, 2), (2.5, 7)))
glyph('=', 5, L((0, 3.2), (5, 3.2)), L((0, 5.8), (5, 5.8)))
glyph('/', 4, L((0, -1), (4, 11)))
glyph('\\', 4, L((4, -1), (0, 11)))
glyph('(', 1.9, arc(3.1, 4.5, 3.1, 7, 116, 244))
glyph(')', 1.9, arc(-1.2, 4.5, 3.1, 7, 64, -64))
glyph('[', 2, L((2, 11), (0, 11), (0, -1), (2, -1)))
glyph(']', 2, L((0, 11), (2, 11), (2, -1), (0, -1)))
glyph('%', 7, ring(1.5, 8.2, 1.5, 1.8), ring(5.5, 1.8, 1.5, 1.8), L((6.2, 10), (0.8, 0)))
glyph('$', 6.4, S(arc(3.2, 7.3, 3, 2.3, 25, 270), arc(3.2, 2.7, 3.2, 2.3, 90, -155)), L((3.2, 11), (3.2, -1)))
glyph('\u20ac', 7.2, arc(4.4, 5, 4, 5, 45, 315), L((0, 6), (4.6, 6)), L((0, 4), (4.6, 4)))
glyph('\u00a3', 6, S(arc(3.9, 7.9, 2.1, 2.1, 15, 180), (1.8, 2), (0.6, 0), (6, 0)), L((0, 5), (4.4, 5)))
glyph('\u00a5', 6.4, L((0, 10), (3.2, 5), (6.4, 10)), L((3.2, 5), (3.2, 0)), L((0.8, 4.4), (5.6, 4.4)), L((0.8, 2.2), (5.6, 2.2)))
glyph('\u20b9', 6, L((0, 10), (6, 10)), L((0, 7.2), (6, 7.2)), S((0.4, 10), (2.2, 10), arc(2.2, 7.6, 2.6, 2.4, 90, -90), (0.6, 5.2), (4.8, 0)))
glyph('#', 7, L((1.5, 0), (2.6, 10)), L((4.5, 0), (5.6, 10)), L((0, 3), (6.6, 3)), L((0.4, 7), (7, 7)))
glyph('*', 4, L((2, 10), (2, 6)), L((0.3, 9), (3.7, 7)), L((0.3, 7), (3.7, 9)))
glyph('_', 6, L((0, -1.5), (6, -1.5)))
glyph('<', 5, L((5, 8), (0, 4.5), (5, 1)))
glyph('>', 5, L((0, 8), (5, 4.5), (0, 1)))
glyph('|', 0, L((0, 11), (0, -2)))
glyph('\u00b7', 0, dot(0, 4.5))
glyph('\u00b0', 3, ring(1.5, 8.5, 1.5, 1.5))
glyph('\u2026', 6, dot(0, 0), dot(3, 0), dot(6, 0))
glyph('&', 7, S((7, 0), (1.6, 6.4), arc(2.8, 8.1, 1.7, 1.9, 215, -35), (1.1, 3.6), arc(2.9, 2.2, 2.9, 2.2, 140, 270), (4.2, 0.4), (7, 4.2)))
glyph('@', 9.6, S(arc(4.8, 4, 4.8, 5, -50, 300)), ring(4.9, 4, 1.8, 2.2), L((6.7, 6.2), (6.7, 2.4), (8, 1.6)))
# Arrows and the filled triangles that mark a change.
glyph('\u2191', 5.6, L((2.8, 0), (2.8, 9.6)), L((0.3, 7), (2.8, 9.8), (5.3, 7)))
glyph('\u2193', 5.6, L((2.8, 10), (2.8, 0.4)), L((0.3, 3), (2.8, 0.2), (5.3, 3)))
glyph('\u2192', 7.2, L((0, 4.5), (7, 4.5)), L((4.5, 7), (7.2, 4.5), (4.5, 2)))
glyph('\u2190', 7.2, L((7.2, 4.5), (0.2, 4.5)), L((2.7, 7), (0, 4.5), (2.7, 2)))
up = [L((0, 0), (6.4, 0), (3.2, 6.4), (0, 0))] + [L((0.45 * k, 0.9 * k), (6.4 - 0.45 * k, 0.9 * k)) for k in range(1, 6)]
glyph('\u25b2', 6.4, *up)
glyph('\u25b4', 6.4, *up)
down = [[(x, 6.4 - y) for (x, y) in s] for s in up]
glyph('\u25bc', 6.4, *down)
glyph('\u25be', 6.4, *down)

def fmt(v):
    r = round(v, 2)
    if r == 0:
        r = 0.0
    return repr(float(r))

out = ["// Generated by Scripts/generate-stroke-font.py; edit the script, not this file.", "",
       "extension StrokeFont {",
       "    /// Glyphs by Unicode scalar: advance width, then strokes as flat x,y lists in font units.",
       "    static let glyphs: [UInt32: StrokeGlyph] = ["]
def literal(s):
    return "[" + ", ".join(fmt(c) for p in s for c in p) + "]"

# A stroke drawn by more than one glyph (the bowl of a, d, g and q) is written once, in sharedStrokes.
uses = {}
for ch in sorted(G, key=ord):
    for s in G[ch][1]:
        uses[literal(s)] = uses.get(literal(s), 0) + 1
shared = [s for s, n in uses.items() if n > 1 and s.count(",") >= 8]
for ch in sorted(G, key=ord):
    width, strokes = G[ch]
    parts = []
    for s in strokes:
        text = literal(s)
        parts.append("sharedStrokes[%d]" % shared.index(text) if text in shared else text)
    out.append("        0x%04X: StrokeGlyph(width: %s, strokes: [%s])," % (ord(ch), fmt(width), ", ".join(parts)))
out.append("    ]")
out.append("")
out.append("    /// Strokes more than one glyph draws.")
out.append("    static let sharedStrokes: [[Double]] = [")
for s in shared:
    out.append("        %s," % s)
out.append("    ]")
out.append("}")
path = os.path.join(os.path.dirname(__file__), "..", "Sources", "RichPushCharts", "Text", "StrokeFont+Glyphs.swift")
with open(path, "w") as f:
    f.write("\n".join(out) + "\n")
print("wrote %d glyphs to %s" % (len(G), os.path.normpath(path)))
