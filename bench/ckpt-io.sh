# bench/run ckpt-io: sourced by bench/run, whose helpers it uses (see bench/README.md).
# shellcheck shell=bash disable=SC2034,SC2154 # the harness sets the globals these use

bm_ckpt_io() { # checkpoint write and read MB/s against raw I/O of the same bytes; training stall
    bench_build bench/ckpt_io
    local tmp=$results/$bench_name.tmp large=1G avail size
    [ -n "$quick" ] && large=256M
    bench_launch="one process (no mpirun); its files in $(basename "$results")/$bench_name.tmp"
    bench_launch="$bench_launch, on the file system of the results, removed afterwards"
    if [ -z "$bench_norun" ]; then
        # two files of the large state at a time, and room to spare
        avail=$(df -Pk "$results" 2>/dev/null | awk 'NR == 2 { print $4 }')
        if [ -n "$avail" ] && [ "$avail" -lt $((4 * 1024 * 1024)) ]; then
            large=0
            bench_note "large state: skipped, only $((avail / 1024)) MiB free where the results" \
                "are (it needs 4 GiB); its headlines read n/a"
        fi
        rm -rf "$tmp"
        say "running ckpt_io"
        # one BLAS thread: no idle BLAS workers spinning beside the I/O (the one training step)
        OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 \
            "$builddir/bench/ckpt_io" --csv "$bench_csv" --dir "$tmp" --large "$large" $quick \
            "${bench_extra[@]}" 2>&1 | tee -a "$bench_log" >&2 || bench_failed+=("ckpt_io")
        rm -rf "$tmp"
    fi
    # state, op and side are names: read with awk, not csv_agg
    # (columns: state,op,side,bytes,file_bytes,seconds,mbps,ratio)
    cv() { awk -F, -v s="$1" -v o="$2" -v d="$3" -v c="$4" \
        '$1 == s && $2 == o && $3 == d { print $c; exit }' "$bench_csv" 2>/dev/null; }
    bench_headline write_over_raw "$(cv model write ckpt 8)"
    bench_headline read_over_raw "$(cv model read ckpt 8)"
    bench_headline async_stall_over_copy "$(cv model stall async 8)"
    bench_headline write_over_raw_1g "$(cv large write ckpt 8)"
    bench_headline read_over_raw_1g "$(cv large read ckpt 8)"
    bench_headline read_cold_over_raw "$(cv model read_cold ckpt 8)"
    bench_headline read_cold_over_raw_1g "$(cv large read_cold ckpt 8)"
    bench_headline ckpt_write_mbps "$(cv model write ckpt 7)"
    bench_headline raw_write_mbps "$(cv model write raw 7)"
    bench_headline ckpt_read_mbps "$(cv model read ckpt 7)"
    bench_headline raw_read_mbps "$(cv model read raw 7)"
    bench_headline ckpt_write_mbps_1g "$(cv large write ckpt 7)"
    bench_headline raw_write_mbps_1g "$(cv large write raw 7)"
    bench_headline ckpt_read_mbps_1g "$(cv large read ckpt 7)"
    bench_headline raw_read_mbps_1g "$(cv large read raw 7)"
    bench_headline ckpt_read_cold_mbps_1g "$(cv large read_cold ckpt 7)"
    bench_headline raw_read_cold_mbps_1g "$(cv large read_cold raw 7)"
    bench_headline copy_s "$(cv model stall memcpy 6)"
    bench_headline async_stall_s "$(cv model stall async 6)"
    bench_headline sync_stall_s "$(cv model stall sync 6)"
    bench_headline sync_over_async "$(awk -v s="$(cv model stall sync 6)" \
        -v a="$(cv model stall async 6)" 'BEGIN { if (s != "" && a > 0) printf "%.1f", s / a }')"
    bench_target "checkpoint write against raw write + fsync, MB/s, default model" \
        write_over_raw '>=' 0.7
    bench_target "the same, 1 GiB state" write_over_raw_1g '>=' 0.7
    bench_target "checkpoint read against raw read, MB/s, page cache, default model" \
        read_over_raw '>=' 0.7
    bench_target "the same, 1 GiB state" read_over_raw_1g '>=' 0.7
    bench_target "the same, 1 GiB state, from the device (pages dropped first)" \
        read_cold_over_raw_1g '>=' 0.7
    bench_target "asynchronous save's stall against a memcpy of the state" \
        async_stall_over_copy '<=' 1.5
    bench_table state op side bytes file_bytes seconds mbps ratio
    size=$(cv large write ckpt 4)
    [ -n "$size" ] && [ "$size" != 1073741824 ] &&
        bench_note "large state: $((size / 1048576)) MiB, not 1 GiB (--quick, or --large);" \
            "the *_1g headlines are of that size"
    bench_note "default model = fmnist (model, EMA, AdamW m and v: 4 x num_params floats) after" \
        "one training step on synthetic images: train_checkpoint_save (capture, HDF5 with" \
        "Fletcher32 chunks, fallocate, fsync, rename, directory fsync) and" \
        "train_checkpoint_restore (attributes, five groups, all checked) against write() of the" \
        "same bytes in 4 MiB blocks + fsync + close, and read(); large = ckpt_file_write and" \
        "ckpt_weights_read per group of four groups of [1024, 1024] tensors"
    bench_note "MB/s = 10^6 bytes of tensor data per second (file_bytes: the HDF5 file's size);" \
        "median of the repetitions, checkpoint and raw interleaved in alternating order; each" \
        "file is removed before it is written again, on both sides"
    bench_note "page cache: op read comes right after the writes, from the page cache on both" \
        "sides alike (raw read() is then a memory copy, HDF5 also checks every chunk's" \
        "Fletcher32); op read_cold first drops both files' pages (posix_fadvise DONTNEED after" \
        "their fsync), so both read from the device; writes end with fsync on both sides"
    bench_note "stall: async = the wall time of train_checkpoint_dir_save_async (the copy of the" \
        "state; the write goes on in its thread and is waited for before the next call, and" \
        "the first call, which allocates the copy, is not counted); async_copy = the copy time" \
        "it reports; async_write = the call until the write is on disk; sync =" \
        "train_checkpoint_dir_save; memcpy = the same bytes into a buffer that exists, once" \
        "before each asynchronous call and once after its write; ratio = seconds over memcpy's;" \
        "four times as many repetitions as the I/O rows"
    # bars: MB/s of checkpoint and raw per (state, op), and the stall in ms
    awk -F, 'NR > 1 && $2 != "stall" { k = $1 " " $2; v[k "," $3] = $7; if ($3 == "ckpt") r[k] = $8
             if (!(k in seen)) { seen[k] = 1; order[n++] = k } }
             END { print "what,checkpoint,raw,checkpoint / raw"
                   for (i = 0; i < n; i++) { k = order[i]
                       print k "," v[k ",ckpt"] "," v[k ",raw"] "," r[k] } }' \
        "$bench_csv" >"$results/$bench_name.bars.csv" 2>/dev/null
    awk -F, 'BEGIN { print "what,ms" } NR > 1 && $2 == "stall" { print $3 "," $6 * 1000 }' \
        "$bench_csv" >"$results/$bench_name.stall.csv" 2>/dev/null
    bench_plot <<GP
width = 1500
set datafile separator ","
bars = "$results/$bench_name.bars.csv"
stall = "$results/$bench_name.stall.csv"
set multiplot layout 1, 3 title name . ": checkpoint I/O against raw I/O of the same bytes"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set xtics rotate by -30
set key top right
set title "MB/s (log scale)"
set logscale y
set ylabel "MB/s"
plot bars using 2:xtic(1) title columnhead(2), "" using 3 title columnhead(3)
set title "checkpoint over raw (target: at least 0.7)"
unset logscale y
set ylabel "ratio"
set yrange [0:1.2]
plot bars using 4:xtic(1) title columnhead(4), \\
    0.7 with lines lw 2 lc rgb "black" title "target"
set title "training stall per checkpoint, default model (log scale)"
set logscale y
set yrange [*:*]
set ylabel "ms"
unset key
plot stall using 2:xtic(1) title columnhead(2) lc rgb "#009e73"
unset multiplot
GP
}
