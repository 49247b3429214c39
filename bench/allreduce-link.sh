# bench/run allreduce-link: sourced by bench/run, whose helpers it uses (see bench/README.md).
# shellcheck shell=bash disable=SC2034,SC2154 # the harness sets the globals these use
. "$bench_dir/lib/train.sh"

bm_allreduce_link() { # gradient all-reduce per wire format over emulated 1, 10, 25 Gbit/s links
    local np=4 links="1 10 25" prog=$builddir/bench/allreduce_link args=() g rc why ml
    local size sizes f i n ncol body pick skipped
    [ -n "$quick" ] && links="1 10"
    [ -n "$bench_nps_override" ] && np=${bench_nps_override%% *}
    set -- "${bench_extra[@]}"
    while [ $# -gt 0 ]; do
        case $1 in
        --links)
            [ $# -ge 2 ] || die "allreduce-link: --links needs a value (e.g. 1,10,25)"
            links=$(printf '%s' "$2" | tr ',' ' ')
            shift ;;
        *) args+=("$1") ;;
        esac
        shift
    done
    for g in $links; do
        printf '%s' "$g" | grep -qE '^[0-9]+(\.[0-9]+)?$' ||
            die "allreduce-link: --links: '$g' is not a speed in Gbit/s"
    done
    bench_launch="mpirun --bind-to none, one BLAS/OpenMP thread per rank, on an emulated"
    bench_launch="$bench_launch cluster of $np hosts x 1 device (tools/cluster), host links"
    bench_launch="$bench_launch rate-limited (tbf) both ways, UCX over TCP between hosts"
    if [ -n "$bench_norun" ]; then
        bench_ran_nps=$(csv_agg_np)
    else
        bench_build bench/allreduce_link
        if ! why=$("$top/tools/cluster" check 2>&1); then
            # never on loopback instead: an unlimited link would measure something else
            bench_failed+=("no emulated cluster, nothing ran: $why")
        else
            # tidal_mpirun, for the shell that tools/cluster starts
            ml="MPIRUN=$(printf %q "$MPIRUN"); $(declare -f tidal_mpirun); tidal_mpirun \"\$@\""
            for g in $links; do
                say "running allreduce_link on $np hosts x 1 device, host links of $g Gbit/s"
                bench_cluster_note "${np}x1/${g}gbit"
                bench_on_cluster "${np}x1/${g}gbit" bash -c "$ml" _ "$np" "$prog" \
                    --csv "$bench_csv" --link "$g" $quick "${args[@]}" 2>&1 |
                    tee -a "$bench_log" | sed -u "s/^/  ${g}g | /" >&2
                rc=$?
                if [ $rc -eq 0 ]; then
                    bench_ran_nps=$np
                else
                    bench_failed+=("allreduce_link at $g Gbit/s (exit $rc; see $(
                        )$(basename "$bench_log"))")
                fi
            done
        fi
    fi
    # format and size_name are names, which csv_agg reads as 0: rows are picked by their text.
    # $pick prints column col of the row of format f, size s, link g.
    pick='NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
          $c["format"] == f && $c["size_name"] == s && $c["link_gbit"] + 0 == g + 0 {
              print $c[col]; exit }'
    # the headline size: the first one that is not a model's gradient (64MiB)
    size=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "size_name") c = i; next }
                    c && $c !~ /^dit/ { print $c; exit }' "$bench_csv" 2>/dev/null)
    for f in f32 bf16 mxfp8 dynamiq; do
        bench_headline "${f}_seconds_1g" "$(awk -F, -v f="$f" -v s="$size" -v g=1 -v col=seconds \
            "$pick" "$bench_csv" 2>/dev/null)"
    done
    for f in bf16 mxfp8 f32; do
        bench_headline "dynamiq_speedup_vs_${f}_1g" "$(train_throughput_ratio \
            "$(awk -F, -v f="$f" -v s="$size" -v g=1 -v col=seconds "$pick" "$bench_csv" \
                2>/dev/null)" \
            "$(awk -F, -v f=dynamiq -v s="$size" -v g=1 -v col=seconds "$pick" "$bench_csv" \
                2>/dev/null)")"
    done
    bench_headline dynamiq_speedup_vs_bf16_dit_1g "$(train_throughput_ratio \
        "$(awk -F, -v f=bf16 -v s=dit-fmnist -v g=1 -v col=seconds "$pick" "$bench_csv" \
            2>/dev/null)" \
        "$(awk -F, -v f=dynamiq -v s=dit-fmnist -v g=1 -v col=seconds "$pick" "$bench_csv" \
            2>/dev/null)")"
    bench_headline dynamiq_rel_err_1g "$(awk -F, -v f=dynamiq -v s="$size" -v g=1 -v col=rel_err \
        "$pick" "$bench_csv" 2>/dev/null)"
    bench_headline f32_wire_gbit_per_s_1g "$(awk -F, -v f=f32 -v s="$size" -v g=1 \
        -v col=wire_gbit_per_s "$pick" "$bench_csv" 2>/dev/null)"
    bench_target "all-reduce of ${size:-64MiB} at 1 Gbit/s, bf16 time / dynamiq time" \
        dynamiq_speedup_vs_bf16_1g '>=' 3
    bench_target "all-reduce of ${size:-64MiB} at 1 Gbit/s, mxfp8 time / dynamiq time" \
        dynamiq_speedup_vs_mxfp8_1g '>=' 1.5
    bench_table link_gbit format size_name bytes seconds busbw_gbs wire_mib wire_gbit_per_s \
        bits_per_value speedup_vs_f32 rel_err
    skipped=$(sed -n 's/^# format \([^:]*\): not built.*/\1/p' "$bench_log" 2>/dev/null |
              sort -u | tr '\n' ' ')
    [ -n "$skipped" ] &&
        bench_note "not built in this tree, so not measured: ${skipped% } (the codec table does" \
            "not know the name; the dynamiq headlines read n/a until it does)"
    bench_note "one f32 sum over $np ranks with gfc's ring (gfc_allreduce, algo ring) of a" \
        "${size:-64MiB} gradient and of the fmnist DiT's gradient (dit-fmnist, its parameter" \
        "count), exact (f32: no codec) or through train_codec_create(format, false) as the codec" \
        "hook (each format's own rounding: to nearest, dynamiq's correlated stochastic); the" \
        "gradient: per block of 4096 values a log-normal scale shared by the ranks, times" \
        "Student-t(4) values that differ per rank; links run (Gbit/s): $(awk -F, \
            'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "link_gbit") c = i; next }
             c && !seen[$c]++ { printf "%s%s", s, $c; s = ", " }' "$bench_csv" 2>/dev/null)"
    bench_note "seconds = median over the samples (5, --quick 2) of the slowest rank's time of" \
        "one whole all-reduce after a barrier, the formats interleaved, after one warm-up each;" \
        "busbw = 2(n-1)/n x bytes / seconds; wire_mib = what one rank handed to UCX for one" \
        "all-reduce (largest rank), wire_gbit_per_s = that over seconds (at most the link's" \
        "speed); rel_err = ||result - exact sum|| / ||exact sum||; speedup_vs_f32 = f32's" \
        "seconds / the format's"
    bench_note "links: tools/cluster makes each rank a host (a network namespace) and a device" \
        "(a cgroup with its share of a core, so that the codecs do not compete for cores), each" \
        "host's veth into a bridge with a tbf qdisc (rate = the link speed, burst max(256 KiB," \
        "1 ms), latency 50 ms) on both ends, so every byte between two ranks crosses the" \
        "sender's uplink and the receiver's downlink; UCX over TCP on it, MPI's start-up and" \
        "barriers too; the tbf byte counters of every host link are in the log (cluster: host" \
        "hK link: ...)"
    if [ -s "$bench_csv" ]; then
        g=$(csv_agg max link_gbit)
        f=$(awk -F, -v f=f32 -v s="$size" -v g="$g" -v col=wire_gbit_per_s "$pick" "$bench_csv")
        [ -n "$f" ] &&
            bench_note "at $g Gbit/s f32 reached $f Gbit/s per rank; wherever a format's" \
                "wire_gbit_per_s is well below its link's speed, $(nproc) cores running $np" \
                "ranks (TCP, copies, encoding and decoding), not the link, set the pace: on a" \
                "machine per rank the compute part would be about $np/$(nproc) times shorter"
    fi
    # one panel per size: bars per format, grouped by link speed
    sizes=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "size_name") c = i; next }
                     c && !seen[$c]++ { print $c }' "$bench_csv" 2>/dev/null)
    n=$(printf '%s\n' "$sizes" | grep -c .)
    [ "$n" -gt 0 ] || return 0
    body="width = $((500 * n + 200))
set multiplot layout 1, $n title name . \": all-reduce time per wire format, $np ranks\"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set yrange [0:*]
set ylabel \"seconds (median)\"
set xlabel \"link speed per rank, both ways\"
set key outside right top"
    i=0
    for size in $sizes; do
        i=$((i + 1))
        awk -F, -v s="$size" '
            NR == 1 { for (j = 1; j <= NF; j++) c[$j] = j; next }
            $c["size_name"] == s { g = $c["link_gbit"]; f = $c["format"]
                if (!(g in gs)) { gs[g] = 1; gl[ng++] = g }
                if (!(f in fs)) { fs[f] = 1; fl[nf++] = f }
                v[g "," f] = $c["seconds"] }
            END { printf "link"; for (k = 0; k < nf; k++) printf ",%s", fl[k]; print ""
                for (j = 0; j < ng; j++) { printf "%s Gbit/s", gl[j]
                    for (k = 0; k < nf; k++) printf ",%s", v[gl[j] "," fl[k]]; print "" } }' \
            "$bench_csv" >"$results/$bench_name.bars$i.csv"
        ncol=$(head -n 1 "$results/$bench_name.bars$i.csv" | awk -F, '{ print NF }')
        body="$body
set title \"$size\"
plot for [k = 2:$ncol] \"$results/$bench_name.bars$i.csv\" using k:xtic(1) title columnhead(k)"
    done
    bench_plot <<GP
$body
unset multiplot
GP
}
