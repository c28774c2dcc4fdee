#!/bin/sh
# The linker of the wheel's instrumented build (make wheel, PGO): rustc's -Cprofile-generate keeps the profiler
# runtime with `-u __llvm_profile_runtime`, two arguments, which zig's cc (maturin --zig) reads as a flag and a
# file. Passed on as one, -Wl,-u,<symbol>, to the linker maturin chose (cargo's CARGO_TARGET_<TRIPLE>_LINKER),
# so that the instrumented build is the final one's twin: same linker, same symbols, a profile that fits it.
real=$(env | sed -n 's/^CARGO_TARGET_[A-Z0-9_]*_LINKER=//p' | head -n 1)
[ -n "$real" ] || { echo "pgo_link.sh: no CARGO_TARGET_<TRIPLE>_LINKER in the environment" >&2; exit 1; }
undefined=0
for arg do
    shift
    if [ "$undefined" = 1 ]; then
        set -- "$@" "-Wl,-u,$arg"
        undefined=0
    elif [ "$arg" = "-u" ]; then
        undefined=1
    else
        set -- "$@" "$arg"
    fi
done
exec "$real" "$@"
