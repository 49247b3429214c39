# bench/lib/train.sh: one training run measured, and its figures read (train-throughput, gpu-train;
# train_throughput_ratio also allreduce-link).
# shellcheck shell=bash disable=SC2034,SC2154 # the harness sets the globals these use

# train-throughput: one `tidal train` or PyTorch run, its peak RSS taken by train_throughput.py's
# `measure` (getrusage of the waited-for child, the same for both sides). $1: side, $2: round,
# $3: the file for its output, then the command. Shows the output with a "side | " prefix (every
# 10th progress line) and keeps all of it in the log.
train_throughput_launch() {
    local side=$1 round=$2 out=$3 rc; shift 3
    say "running $side (round $round, $tt_threads threads)"
    echo "== $side, round $round: $*" >>"$bench_log"
    OPENBLAS_NUM_THREADS=$tt_threads OMP_NUM_THREADS=$tt_threads \
        timeout "$TIDAL_TEST_TIMEOUT" "$tt_py" "$tt_script" measure -- "$@" >"$out" 2>&1
    rc=$?
    cat "$out" >>"$bench_log"
    awk -v s="$side" '!/^step / || ($2 + 0) % 10 == 0 { print "  " s " | " $0 }' "$out" >&2
    [ $rc -eq 0 ] || bench_failed+=("$side, round $round (exit $rc; see $(basename "$bench_log"))")
    return $rc
}

# The peak RSS in MiB that `measure` reported in file $1.
train_throughput_rss() {
    awk '$1 == "train_throughput:" && $2 == "peak_rss_kib" { printf "%.1f", $3 / 1024 }' "$1"
}

# The rates of the progress lines ("step K/N ... R img/s", one a step) of file $1 after the
# first $2 steps, batch $3: "MEAN MEDIAN", MEAN = images / the summed step times, MEDIAN = batch /
# the median step time. Nothing when no line is there.
train_throughput_rates() {
    awk -v w="$2" -v b="$3" '
        $1 == "step" { split($2, k, "/"); if (k[1] + 0 <= w) next
            for (i = 3; i < NF; i++) if ($(i + 1) == "img/s" && $i > 0) {
                t[++n] = b / $i; secs += t[n] } }
        END { if (!n) exit
            for (i = 2; i <= n; i++) { v = t[i]; for (j = i - 1; j >= 1 && t[j] > v; j--)
                t[j + 1] = t[j]; t[j + 1] = v }
            med = n % 2 ? t[(n + 1) / 2] : (t[n / 2] + t[n / 2 + 1]) / 2
            printf "%.2f %.2f\n", n * b / secs, b / med }' "$1"
}

# The largest value of CSV column $2 over the rows of side $1 (nothing when there is none).
train_throughput_max() {
    awk -F, -v side="$1" -v col="$2" '
        NR == 1 { for (i = 1; i <= NF; i++) if ($i == col) c = i; next }
        c && $1 == side && (n++ == 0 || $c + 0 > m) { m = $c + 0 }
        END { if (n) print m }' "$bench_csv"
}

# The median of CSV column $2 over the rounds of side $1 (nothing when there is none).
train_throughput_median() {
    awk -F, -v side="$1" -v col="$2" '
        NR == 1 { for (i = 1; i <= NF; i++) if ($i == col) c = i; next }
        c && $1 == side { v[++n] = $c + 0 }
        END { if (!n) exit
            for (i = 2; i <= n; i++) { x = v[i]; for (j = i - 1; j >= 1 && v[j] > x; j--)
                v[j + 1] = v[j]; v[j + 1] = x }
            print n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }' "$bench_csv"
}

# The number of progress lines ("step K/N ...") in file $1.
train_throughput_steps() {
    awk '$1 == "step" && $2 ~ /^[0-9]+\// { n++ } END { print n + 0 }' "$1"
}

# $1 / $2 to three decimals, nothing when either is missing.
train_throughput_ratio() {
    [ -n "$1" ] && [ -n "$2" ] &&
        awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.3f", a / b }'
}
