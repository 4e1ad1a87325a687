#!/usr/bin/env python3
"""cudaemu_launch: copy a .cu file for the host emulator (see cudaemu.h).

Rewrites every kernel launch `k<<<grid, block, smem, stream>>>(args)` into
`CUDAEMU_LAUNCH(k, grid, block, smem, stream)(args)`, and nothing else; a
#line directive keeps compiler messages pointing at the original file.
Usage: cudaemu_launch.py IN.cu OUT.cc
"""
import re
import sys

LAUNCH = re.compile(r"(\b[A-Za-z_]\w*(?:<[^<>;(){}]*>)?)\s*<<<(.*?)>>>\s*\(", re.S)


def main():
    src, dst = sys.argv[1], sys.argv[2]
    with open(src, encoding="utf-8") as f:
        text = f.read()
    out, n = LAUNCH.subn(lambda m: "CUDAEMU_LAUNCH(%s, %s)(" % (m.group(1), m.group(2)), text)
    if "<<<" in out:
        line = out[: out.index("<<<")].count("\n") + 1
        sys.exit("cudaemu_launch: %s: a launch the rewrite did not match near line %d" % (src, line))
    with open(dst, "w", encoding="utf-8") as f:
        f.write('#line 1 "%s"\n' % src)
        f.write(out)
    print("cudaemu_launch: %s: %d launches" % (src, n))


if __name__ == "__main__":
    main()
