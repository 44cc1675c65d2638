"""Measures of the code's shape that grep cannot take (Scripts/shape-counts prints them):
  long-functions DIR... : functions (and initializers) longer than 80 lines, and the longest
  duplicates DIR...     : pairs of places sharing six or more lines (blank lines, comments and lines of braces alone
                          left out, indentation ignored); a run of shared lines counts once, however long
  unstructured DIR...   : tasks started outside a task group (`Task {`, `Task.detached {`), with where
"""

import os
import re
import signal
import sys

FUNC = re.compile(r"^\s*(@\w+(\([^)]*\))?\s+)*((public|private|fileprivate|internal|package|open|static|final|"
                  r"override|mutating|nonisolated|convenience|required|class)\s+)*(func\s|init[?!]?\s*[(<]|"
                  r"subscript\s*[(<])")
UNSTRUCTURED = re.compile(r"(?<![A-Za-z_.])Task(<[^>]*>)?(\.detached)?\s*(\{|\(\s*priority)")


def swift_files(dirs):
    for d in dirs:
        for root, _, files in os.walk(d):
            for f in sorted(files):
                if f.endswith(".swift"):
                    yield os.path.join(root, f)


def code(line):
    """The line without its comment and its strings' contents (braces in either do not count)."""
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    i = line.find("//")
    return line if i < 0 else line[:i]


def functions(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    out = []
    i = 0
    while i < len(lines):
        if FUNC.match(lines[i]) and not lines[i].lstrip().startswith("//"):
            depth, opened, j = 0, False, i
            while j < len(lines):
                c = code(lines[j])
                depth += c.count("{") - c.count("}")
                opened = opened or "{" in c
                if opened and depth <= 0:
                    break
                # A requirement in a protocol: no body.
                if not opened and j > i and FUNC.match(lines[j]):
                    j -= 1
                    break
                j += 1
            if opened:
                out.append((j - i + 1, path, i + 1, lines[i].strip()))
            i = i + 1
        else:
            i += 1
    return out


def long_functions(dirs, limit=80):
    found = sorted((f for p in swift_files(dirs) for f in functions(p) if f[0] > limit), reverse=True)
    print(len(found))
    for n, path, line, text in found[:12]:
        print("  %4d lines  %s:%d  %s" % (n, path, line, text[:70]))


def meaningful(path):
    out = []
    for n, raw in enumerate(open(path, encoding="utf-8"), 1):
        s = raw.strip()
        if not s or s.startswith("//"):
            continue
        out.append((s, n))
    return out


def duplicates(dirs, window=6):
    files = {p: meaningful(p) for p in swift_files(dirs)}
    seen = {}
    pairs = set()
    for p, lines in files.items():
        for k in range(len(lines) - window + 1):
            key = "\n".join(s for s, _ in lines[k:k + window])
            for q, m in seen.get(key, []):
                pairs.add((q, m, p, k))
            seen.setdefault(key, []).append((p, k))
    # A run of windows shifted together is one shared place.
    starts = [(a, i, b, j) for a, i, b, j in pairs if (a, i - 1, b, j - 1) not in pairs]
    print(len(starts))
    by_file = {}
    for a, i, b, j in starts:
        key = (a, b)
        by_file[key] = by_file.get(key, 0) + 1
    for (a, b), n in sorted(by_file.items(), key=lambda x: -x[1])[:8]:
        print("  %3d  %s  ~  %s" % (n, a, b))


def unstructured(dirs):
    found = []
    for p in swift_files(dirs):
        for n, raw in enumerate(open(p, encoding="utf-8"), 1):
            c = code(raw)
            if UNSTRUCTURED.search(c):
                found.append("%s:%d" % (p, n))
    print(len(found))
    for f in found:
        print("  " + f)


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    what, dirs = sys.argv[1], sys.argv[2:]
    {"long-functions": long_functions, "duplicates": duplicates, "unstructured": unstructured}[what](dirs)
