#!/usr/bin/env bash
# Compile-time cost of #[derive(Agent)]: `cargo check` of agents with 10, 50 and 200 states and
# 20 tools, against the same enums without the derive, measured in the same run.
#
#   benches/compile-time/run.sh            # 10, 50, 200 states, 3 runs each (median)
#   SIZES="200" RUNS=5 benches/compile-time/run.sh
#   QUICK=1 benches/compile-time/run.sh    # 10 states, one run: what CI runs, so it cannot rot
#
# Writes a throwaway crate (depending on agent-core, the package `durable-agents-core`, by
# path) into a temp dir with its own target dir; the first check builds the dependencies and
# is not measured. With QUICK=1 the target dir is kept outside the clone
# (COMPILE_BENCH_TARGET_DIR, default ~/.cache/durable-agents/compile-bench), so the
# dependencies are built once per machine; COMPILE_BENCH_TARGET_DIR works without QUICK too.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
if [ -n "${QUICK:-}" ]; then
  SIZES="${SIZES:-10}"
  RUNS="${RUNS:-1}"
  COMPILE_BENCH_TARGET_DIR="${COMPILE_BENCH_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/durable-agents/compile-bench}"
fi
SIZES="${SIZES:-10 50 200}"
RUNS="${RUNS:-3}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
TARGET="${COMPILE_BENCH_TARGET_DIR:-$WORK/target}"
mkdir -p "$TARGET"

mkdir -p "$WORK/src"
cat > "$WORK/Cargo.toml" <<TOML
[package]
name = "agent-compile-bench"
version = "0.0.0"
edition = "2024"
publish = false

[dependencies]
agent-core = { package = "durable-agents-core", path = "$ROOT/agent-core" }
serde = { version = "1", features = ["derive"] }

[workspace]
TOML
cp "$ROOT/Cargo.lock" "$WORK/Cargo.lock" 2>/dev/null || true

# tools.rs: 20 tools (16 read, 3 write, 1 hybrid), the same in both variants.
gen_tools() {
  echo "use agent_core::{Compensate, Tool};"
  for t in $(seq 0 19); do
    kind=read
    [ "$t" -ge 16 ] && kind=write
    [ "$t" -eq 19 ] && kind=hybrid
    echo "/// Tool $t."
    echo "#[derive(Tool)]"
    echo "#[tool(kind = $kind, input = String, output = String)]"
    echo "pub struct T$t;"
  done
  echo "impl Compensate for T19 { type With = T18; fn compensation(&self, i: &String, _: &String) -> String { i.clone() } }"
}

# The agent: a chain S0 -> S1 -> ... -> Done, a back edge every 5th state, an on_error edge to
# Failed every 3rd, an LLM-routed state every 10th, three tools per state, mixed variant shapes.
gen_agent() { # $1 = states, $2 = with|without
  local n=$1 with=$2 last=$(( $1 - 2 ))
  echo "#![allow(dead_code)]"
  echo "use serde::{Deserialize, Serialize};"
  echo "#[allow(unused_imports)]"
  echo "use crate::tools::*;"
  if [ "$with" = with ]; then
    echo "#[derive(agent_core::Agent, Clone, Serialize, Deserialize)]"
    local decl="read($(seq -s, -f 'T%g' 0 15)), write(T16, T17, T18), hybrid(T19(compensate = T18))"
    echo "#[agent(tools($decl))]"
  else
    echo "#[derive(Clone, Serialize, Deserialize)]"
  fi
  echo "pub enum Big {"
  for i in $(seq 0 "$last"); do
    local next="S$(( i + 1 ))"
    [ "$i" -eq "$last" ] && next=Done
    local to="$next"
    [ $(( i % 5 )) -eq 4 ] && to="$to, S0"
    local attrs="to($to), tools(T$(( i % 20 )), T$(( (i + 7) % 20 )), T$(( (i + 13) % 20 )))"
    [ "$i" -eq 0 ] && attrs="initial, $attrs"
    [ $(( i % 10 )) -eq 9 ] && attrs="$attrs, route = llm"
    [ $(( i % 3 )) -eq 2 ] && attrs="$attrs, on_error = Failed"
    [ "$with" = with ] && echo "    #[agent($attrs)]"
    case $(( i % 3 )) in
      0) echo "    S$i { n: u32, label: String }," ;;
      1) echo "    S$i(u64)," ;;
      2) echo "    S$i," ;;
    esac
  done
  [ "$with" = with ] && echo "    #[agent(terminal)]"
  echo "    Done,"
  [ "$with" = with ] && echo "    #[agent(terminal, compensate)]"
  echo "    Failed(String),"
  echo "}"
}

gen_tools > "$WORK/src/tools.rs"
printf 'pub mod tools;\npub mod agent;\n' > "$WORK/src/lib.rs"

check() { # prints seconds of one `cargo check` of the bench crate
  touch "$WORK/src/agent.rs"
  local t0 t1
  t0=$(date +%s.%N)
  (cd "$WORK" && CARGO_TARGET_DIR="$TARGET" cargo check -q 2>"$WORK/err") || { cat "$WORK/err" >&2; exit 1; }
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f\n", b - a }'
}

median() { sort -g | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.3f", m}'; }

echo "building dependencies (not measured)..." >&2
gen_agent 10 without > "$WORK/src/agent.rs"
(cd "$WORK" && CARGO_TARGET_DIR="$TARGET" cargo check -q)

echo "rustc: $(rustc --version); $RUNS runs per figure, median"
printf '%-8s %14s %14s %12s %8s\n' states "without (s)" "with (s)" "added (s)" ratio
for n in $SIZES; do
  gen_agent "$n" without > "$WORK/src/agent.rs"
  check >/dev/null
  base=$(for _ in $(seq "$RUNS"); do check; done | median)
  gen_agent "$n" with > "$WORK/src/agent.rs"
  check >/dev/null
  derived=$(for _ in $(seq "$RUNS"); do check; done | median)
  added=$(awk -v a="$base" -v b="$derived" 'BEGIN { printf "%.4f", b - a }')
  ratio=$(awk -v a="$base" -v b="$derived" 'BEGIN { printf "%.4f", b / a }')
  printf '%-8s %14.3f %14.3f %12.3f %7.2fx\n' "$n" "$base" "$derived" "$added" "$ratio"
done
