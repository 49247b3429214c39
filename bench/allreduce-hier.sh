# bench/run allreduce-hier: sourced by bench/run, whose helpers it uses (see bench/README.md).
# shellcheck shell=bash disable=SC2034,SC2154 # the harness sets the globals these use
. "$bench_dir/lib/train.sh"

# hier_pick METHOD SIZE LINK COLUMN: that column of the row (the first one) of the main CSV
hier_pick() {
    awk -F, -v m="$1" -v s="$2" -v g="$3" -v col="$4" '
        NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
        $c["method"] == m && $c["size_name"] == s && $c["link_gbit"] + 0 == g + 0 {
            print $c[col]; exit }' "$bench_csv" 2>/dev/null
}

bm_allreduce_hier() { # hierarchical all-reduce (f32 within a host, dynamiq between hosts) against the flat ring and MPI_Allreduce on 4 emulated hosts x 2 devices, and time-to-loss
    local hosts=4 rph=2 cpu=0.22 links="1 10" prog=$builddir/bench/allreduce_hier args=()
    local steps=300 val=20 seeds="1 2 3" train=1 np g rc why ml spec f out tmp seed v
    local size sizes n i ncol body losscsv=$results/$bench_name.loss.csv ran
    [ -n "$quick" ] && steps=60 val=10 seeds=1
    set -- "${bench_extra[@]}"
    while [ $# -gt 0 ]; do
        case $1 in
        --links|--steps|--val-every|--seeds)
            [ $# -ge 2 ] || die "allreduce-hier: $1 needs a value"
            case $1 in --links) links=$(printf '%s' "$2" | tr ',' ' ') ;;
                       --steps) steps=$2 ;; --val-every) val=$2 ;;
                       --seeds) seeds=$(printf '%s' "$2" | tr ',' ' ') ;; esac
            shift ;;
        --no-train) train="" ;;
        *) args+=("$1") ;;
        esac
        shift
    done
    for g in $links; do
        printf '%s' "$g" | grep -qE '^[0-9]+(\.[0-9]+)?$' ||
            die "allreduce-hier: --links: '$g' is not a speed in Gbit/s"
    done
    for v in "$steps" "$val" $seeds; do
        printf '%s' "$v" | grep -qE '^[1-9][0-9]*$' || die "allreduce-hier: '$v' is not a count"
    done
    np=$((hosts * rph))
    bench_launch="mpirun --bind-to none, one BLAS/OpenMP thread per rank, on an emulated cluster"
    bench_launch="$bench_launch of $hosts hosts x $rph devices of $cpu core (tools/cluster): shared"
    bench_launch="$bench_launch memory within a host, TCP over tbf-limited host links between hosts"
    if [ -n "$bench_norun" ]; then
        bench_ran_nps=$(csv_agg_np)
    else
        bench_build bench/allreduce_hier src/tidal
        if ! why=$("$top/tools/cluster" check 2>&1); then
            # never on one host instead: there would be no host to be hierarchical about
            bench_failed+=("no emulated cluster, nothing ran: $why")
        else
            ml="MPIRUN=$(printf %q "$MPIRUN"); $(declare -f tidal_mpirun); tidal_mpirun \"\$@\""
            for g in $links; do
                spec="${hosts}x${rph}@${cpu}/${g}gbit"
                say "running allreduce_hier on $hosts hosts x $rph devices, links of $g Gbit/s"
                bench_cluster_note "$spec" # here: the pipeline's stages are subshells
                bench_on_cluster "$spec" bash -c "$ml" _ "$np" "$prog" --csv "$bench_csv" \
                    --link "$g" $quick "${args[@]}" 2>&1 |
                    tee -a "$bench_log" | sed -u "s/^/  ${g}g | /" >&2
                rc=$?
                [ $rc -eq 0 ] && bench_ran_nps=$np ||
                    bench_failed+=("allreduce_hier at $g Gbit/s (exit $rc; see $(basename "$bench_log"))")
                # Open MPI's hierarchical collectives (han), where this Open MPI has them: a
                # launch of its own, since the component is chosen when MPI starts; one sample
                # after the warm-up (4.1.4's han takes about 30 s for 64 MiB here)
                if ompi_info 2>/dev/null | grep -q 'MCA coll: han'; then
                    say "running MPI_Allreduce with coll han at $g Gbit/s"
                    bench_on_cluster "$spec" bash -c "$ml" _ "$np" --mca coll_han_priority 100 \
                        "$prog" --csv "$bench_csv" --link "$g" --methods mpi --mpi-name mpi-han \
                        "${args[@]}" --iters 1 2>&1 |
                        tee -a "$bench_log" | sed -u "s/^/  ${g}g han | /" >&2
                    rc=$?
                    [ $rc -eq 0 ] || bench_failed+=("MPI_Allreduce with han at $g Gbit/s (exit" \
                        "$rc; see $(basename "$bench_log"))")
                fi
            done
            # time-to-loss: the fmnist DiT on the same cluster at 1 Gbit/s; auto takes hier for
            # its 5 MB gradient, --gfc-allreduce ring the flat ring
            if [ -n "$train" ] && [ -d /usr/share/datasets/fashion-mnist ]; then
                tmp=$(mktemp) || die "cannot create a temporary file"
                printf 'run,seed,np,link_gbit,step,seconds,val_loss,val_loss_ema,loss\n' >"$losscsv"
                rm -rf "$results/$bench_name.runs"
                for seed in $seeds; do
                    for f in f32 hier-dynamiq flat-dynamiq; do
                        out=$results/$bench_name.runs/$f-seed$seed
                        local ar=dynamiq ga=auto
                        [ $f = f32 ] && ar=f32
                        [ $f = flat-dynamiq ] && ga=ring
                        spec="${hosts}x${rph}@${cpu}/1gbit"
                        say "running tidal train --allreduce $ar --gfc-allreduce $ga --seed $seed"
                        bench_cluster_note "$spec"
                        bench_on_cluster "$spec" bash -c "$ml" _ "$np" "$builddir/src/tidal" \
                            train --model fmnist --data fmnist --steps "$steps" \
                            --val-every "$val" --log-every "$val" --seed "$seed" \
                            --allreduce "$ar" --gfc-allreduce "$ga" --ckpt-every 0 \
                            --resume none --out "$out" 2>&1 |
                            tee -a "$bench_log" | tee "$tmp" | sed -u "s/^/  $f s$seed | /" >&2
                        rc=$?
                        if [ $rc -ne 0 ]; then
                            bench_failed+=("tidal train $f --seed $seed (exit $rc)")
                            continue
                        fi
                        awk -F, -v f="$f" -v sd="$seed" -v np="$np" '
                            NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
                            $c["val_loss"] != "" {
                                printf "%s,%s,%s,1,%s,%s,%s,%s,%s\n", f, sd, np, $c["step"],
                                    $c["seconds"], $c["val_loss"], $c["val_loss_ema"], $c["loss"] }' \
                            "$out/loss.csv" >>"$losscsv"
                        rm -rf "$out/ckpt" "$out/model.h5"
                    done
                done
                rm -f "$tmp"
            elif [ -n "$train" ]; then
                bench_note "time-to-loss not run: dataset-fashion-mnist is not installed"
            fi
        fi
    fi
    # ---- headlines ----
    size=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "size_name") c = i; next }
                    c && $c !~ /^dit/ { print $c; exit }' "$bench_csv" 2>/dev/null)
    local dit
    dit=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "size_name") c = i; next }
                   c && $c ~ /^dit/ { print $c; exit }' "$bench_csv" 2>/dev/null)
    for g in 1 10; do
        for f in hier+dynamiq ring+dynamiq ring+bf16 mpi mpi-han; do
            bench_headline "$(printf '%s' "$f" | tr '+-' '__')_seconds_${g}g" \
                "$(hier_pick "$f" "$size" $g seconds)"
        done
        bench_headline "hier_speedup_vs_flat_dynamiq_${g}g" "$(train_throughput_ratio \
            "$(hier_pick ring+dynamiq "$size" $g seconds)" "$(hier_pick hier+dynamiq "$size" $g seconds)")"
        bench_headline "hier_speedup_vs_flat_bf16_${g}g" "$(train_throughput_ratio \
            "$(hier_pick ring+bf16 "$size" $g seconds)" "$(hier_pick hier+dynamiq "$size" $g seconds)")"
        bench_headline "hier_speedup_vs_mpi_${g}g" "$(train_throughput_ratio \
            "$(hier_pick mpi "$size" $g seconds)" "$(hier_pick hier+dynamiq "$size" $g seconds)")"
        bench_headline "hier_speedup_vs_mpi_han_${g}g" "$(train_throughput_ratio \
            "$(hier_pick mpi-han "$size" $g seconds)" "$(hier_pick hier+dynamiq "$size" $g seconds)")"
        bench_headline "hier_speedup_vs_flat_dynamiq_dit_${g}g" "$(train_throughput_ratio \
            "$(hier_pick ring+dynamiq "$dit" $g seconds)" "$(hier_pick hier+dynamiq "$dit" $g seconds)")"
        bench_headline "hier_speedup_vs_mpi_dit_${g}g" "$(train_throughput_ratio \
            "$(hier_pick mpi "$dit" $g seconds)" "$(hier_pick hier+dynamiq "$dit" $g seconds)")"
    done
    bench_headline hier_vnmse_1g "$(hier_pick hier+dynamiq "$size" 1 vnmse)"
    bench_headline flat_dynamiq_vnmse_1g "$(hier_pick ring+dynamiq "$size" 1 vnmse)"
    bench_headline hier_vnmse_over_flat_dynamiq "$(awk -v a="$(hier_pick hier+dynamiq "$size" 1 vnmse)" \
        -v b="$(hier_pick ring+dynamiq "$size" 1 vnmse)" 'BEGIN { if (a != "" && b > 0) printf "%.3f", a / b }')"
    bench_headline hier_vnmse_over_flat_dynamiq_dit "$(awk -v a="$(hier_pick hier+dynamiq "$dit" 1 vnmse)" \
        -v b="$(hier_pick ring+dynamiq "$dit" 1 vnmse)" 'BEGIN { if (a != "" && b > 0) printf "%.3f", a / b }')"
    # time-to-loss: the last validation of each run, mean over the seeds
    local last='NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
          $c["run"] == f { v[$c["seed"]] = $c[col] }
          END { for (k in v) { s += v[k]; n++ } if (n) printf "%.6f\n", s / n }'
    for f in f32 hier-dynamiq flat-dynamiq; do
        v=$(printf '%s' "$f" | tr '-' '_')
        bench_headline "${v}_final_val_loss" \
            "$(awk -F, -v f="$f" -v col=val_loss_ema "$last" "$losscsv" 2>/dev/null)"
        bench_headline "${v}_train_seconds" \
            "$(awk -F, -v f="$f" -v col=seconds "$last" "$losscsv" 2>/dev/null)"
    done
    for f in hier flat; do
        bench_headline "${f}_final_val_loss_rel_to_f32" "$(awk \
            -v a="$(bench_headline_get "${f}_dynamiq_final_val_loss")" \
            -v b="$(bench_headline_get f32_final_val_loss)" \
            'BEGIN { if (a != "n/a" && b != "n/a" && b > 0) printf "%.5f", a / b - 1 }')"
    done
    bench_target "all-reduce of ${size:-64MiB} at 1 Gbit/s, flat-ring dynamiq time / hier+dynamiq time" \
        hier_speedup_vs_flat_dynamiq_1g '>=' 1.5
    bench_target "all-reduce of ${size:-64MiB} at 1 Gbit/s, MPI_Allreduce time / hier+dynamiq time" \
        hier_speedup_vs_mpi_1g '>=' 4
    bench_target "vNMSE of hier+dynamiq / flat-ring dynamiq's, ${size:-64MiB} at 1 Gbit/s" \
        hier_vnmse_over_flat_dynamiq '<=' 1.0
    bench_target "final validation loss (EMA), hier+dynamiq / f32 - 1, at least" \
        hier_final_val_loss_rel_to_f32 '>=' -0.005
    bench_target "final validation loss (EMA), hier+dynamiq / f32 - 1, at most" \
        hier_final_val_loss_rel_to_f32 '<=' 0.005
    bench_table link_gbit method size_name seconds min_seconds wire_mib bits_per_value vnmse \
        identical
    bench_note "each method: one f32 sum over the $np ranks (world order: 2 ranks on each host)" \
        "of a ${size:-64MiB} gradient and of the fmnist DiT's gradient ($dit, its parameter" \
        "count); hier+FORMAT = gfc's hier (f32 within a host, a ring per local rank between" \
        "hosts through the codec), ring+FORMAT = gfc's flat ring through the codec on every hop," \
        "mpi = MPI_Allreduce with Open MPI's default collectives (tuned), mpi-han = the same with" \
        "--mca coll_han_priority 100 (a launch of its own, one sample after the warm-up);" \
        "codecs from train_codec_create" \
        "(FORMAT, false): dynamiq at its default 5 bits, correlated stochastic rounding; the" \
        "gradient: per block of 4096 values a log-normal scale shared by the ranks, times" \
        "Student-t(4) values of each rank's own (allreduce-link's)"
    bench_note "seconds = median over the samples (5, --quick 3) of the slowest rank's time of" \
        "one whole all-reduce after a barrier, the methods interleaved, after one warm-up each;" \
        "vnmse = |result - exact|^2 / |exact|^2 (exact: gfc's ring without a codec, f32);" \
        "identical = every rank's result hashes the same; wire_mib = what one rank handed to UCX" \
        "(largest rank; within the host too; none for MPI), bits_per_value = its bits per value"
    if [ -s "$losscsv" ]; then
        ran=$(awk -F, 'NR > 1 && !seen[$2]++ { printf "%s ", $2 }' "$losscsv")
        bench_note "time-to-loss: \`tidal train --model fmnist --data fmnist --steps $steps" \
            "--val-every $val --seed SEED --allreduce f32|dynamiq\` on the same cluster at 1" \
            "Gbit/s, seeds $ran(f32 and hier-dynamiq with --gfc-allreduce auto, which takes hier" \
            "for the 5 MB gradient across hosts; flat-dynamiq with --gfc-allreduce ring);" \
            "*_final_val_loss = the EMA weights' last validation loss, mean over the seeds;" \
            "*_train_seconds = the last row's seconds; rows in $(basename "$losscsv")"
    fi
    bench_note "links: tools/cluster makes $hosts hosts (network namespaces) of $rph devices (a" \
        "cgroup of $cpu core each: the codecs, copies and TCP work of a rank run on its share)," \
        "each host's link shaped by tbf at the link speed both ways; UCX over TCP between hosts," \
        "shared memory within a host (no CMA: gfc's default)"
    # one panel per size: bars per method, grouped by link speed
    sizes=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "size_name") c = i; next }
                     c && !seen[$c]++ { print $c }' "$bench_csv" 2>/dev/null)
    n=$(printf '%s\n' "$sizes" | grep -c .)
    [ "$n" -gt 0 ] || return 0
    body="width = $((500 * n + 250))
set multiplot layout 1, $n title name . \": all-reduce time, $hosts hosts x $rph devices\"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set logscale y
set yrange [0.01:*]
set ylabel \"seconds (median, log scale)\"
set xlabel \"host link speed, both ways\"
set key outside right top"
    i=0
    for size in $sizes; do
        i=$((i + 1))
        awk -F, -v s="$size" '
            NR == 1 { for (j = 1; j <= NF; j++) c[$j] = j; next }
            $c["size_name"] == s { g = $c["link_gbit"]; f = $c["method"]
                if (!(g in gs)) { gs[g] = 1; gl[ng++] = g }
                if (!(f in fs)) { fs[f] = 1; fl[nf++] = f }
                if (!((g "," f) in v)) v[g "," f] = $c["seconds"] }
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
