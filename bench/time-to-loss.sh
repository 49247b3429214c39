# bench/run time-to-loss: sourced by bench/run, whose helpers it uses (see bench/README.md).
# shellcheck shell=bash disable=SC2034,SC2154 # the harness sets the globals these use

bm_time_to_loss() { # validation loss against wall time: the DiT on 4 ranks over 1 Gbit/s links, several seeds
    local np=4 steps=300 val=20 link=1 formats="f32 bf16 mxfp8 dynamiq" seeds="1 2 3" f out rc why
    local ml tmp ran="" skipped="" last rel v seed col
    [ -n "$quick" ] && steps=60 val=10 seeds=1
    [ -n "$bench_nps_override" ] && np=${bench_nps_override%% *}
    set -- "${bench_extra[@]}"
    while [ $# -gt 0 ]; do
        case $1 in
        --steps|--val-every|--formats|--link|--seeds)
            [ $# -ge 2 ] || die "time-to-loss: $1 needs a value"
            case $1 in --steps) steps=$2 ;; --val-every) val=$2 ;; --link) link=$2 ;;
                       --formats) formats=$(printf '%s' "$2" | tr ',' ' ') ;;
                       --seeds) seeds=$(printf '%s' "$2" | tr ',' ' ') ;; esac
            shift ;;
        *) die "time-to-loss: unknown option '$1' (it takes --steps N --val-every N" \
               "--formats a,b,c --seeds 1,2,3 --link GBIT)" ;;
        esac
        shift
    done
    for v in "$steps" "$val" $seeds; do
        printf '%s' "$v" | grep -qE '^[1-9][0-9]*$' || die "time-to-loss: '$v' is not a count"
    done
    [ -n "$seeds" ] || die "time-to-loss: --seeds needs at least one seed"
    printf '%s' "$link" | grep -qE '^[0-9]+(\.[0-9]+)?$' ||
        die "time-to-loss: --link '$link' is not a speed in Gbit/s"
    bench_launch="mpirun --bind-to none, one BLAS/OpenMP thread per rank, on an emulated"
    bench_launch="$bench_launch cluster of $np hosts x 1 device (tools/cluster), host links"
    bench_launch="$bench_launch rate-limited to $link Gbit/s (tbf) both ways, UCX over TCP"
    if [ -n "$bench_norun" ]; then
        bench_ran_nps=$(csv_agg_np)
        # what the CSV's run did: the last step, and the first validation's step
        steps=$(csv_agg max step) val=$(csv_agg min step) link=$(csv_agg first link_gbit)
        seeds=$(awk -F, 'NR > 1 && !seen[$2]++ { printf "%s ", $2 }' "$bench_csv" 2>/dev/null)
    else
        bench_build src/tidal
        if ! why=$("$top/tools/cluster" check 2>&1); then
            bench_failed+=("no emulated cluster, nothing ran: $why")
        else
            ml="MPIRUN=$(printf %q "$MPIRUN"); $(declare -f tidal_mpirun); tidal_mpirun \"\$@\""
            tmp=$(mktemp) || die "cannot create a temporary file"
            printf 'format,seed,np,link_gbit,step,seconds,val_loss,val_loss_ema,loss\n' \
                >"$bench_csv"
            rm -rf "$results/$bench_name.runs"
            # seed by seed, every format within a seed: a drift of the machine over the
            # benchmark's quarter of an hour hits every format alike
            for seed in $seeds; do
                for f in $formats; do
                    case " $skipped " in *" $f "*) continue ;; esac
                    out=$results/$bench_name.runs/$f-seed$seed
                    say "running tidal train --allreduce $f --seed $seed at $np ranks over" \
                        "$link Gbit/s links"
                    bench_cluster_note "${np}x1/${link}gbit"
                    bench_on_cluster "${np}x1/${link}gbit" bash -c "$ml" _ "$np" \
                        "$builddir/src/tidal" train --model fmnist --data fmnist --steps "$steps" \
                        --val-every "$val" --log-every "$val" --seed "$seed" --allreduce "$f" \
                        --ckpt-every 0 --resume none --out "$out" 2>&1 |
                        tee -a "$bench_log" | tee "$tmp" | sed -u "s/^/  $f s$seed | /" >&2
                    rc=$?
                    if [ $rc -ne 0 ]; then
                        if grep -qE "unknown codec|invalid value '$f' for --allreduce" "$tmp"; then
                            skipped="$skipped $f"
                        else
                            bench_failed+=("tidal train --allreduce $f --seed $seed (exit $rc;" \
                                "see $(basename "$bench_log"))")
                        fi
                        continue
                    fi
                    if ! awk -F, -v f="$f" -v sd="$seed" -v np="$np" -v g="$link" '
                            NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i
                                      if (!("val_loss_ema" in c) || !("seconds" in c)) exit 1
                                      next }
                            $c["val_loss"] != "" { n++
                                printf "%s,%s,%s,%s,%s,%s,%s,%s,%s\n", f, sd, np, g, $c["step"],
                                    $c["seconds"], $c["val_loss"], $c["val_loss_ema"], $c["loss"] }
                            END { exit n == 0 }' "$out/loss.csv" >>"$bench_csv"; then
                        bench_failed+=("tidal train --allreduce $f: no val_loss_ema and seconds" \
                            "in $out/loss.csv (a tidal without them?)")
                        continue
                    fi
                    # only the curves are wanted: loss.csv and loss.png stay, the weights go
                    rm -rf "$out/ckpt" "$out/model.h5"
                    bench_ran_nps=$np
                done
            done
            rm -f "$tmp"
            [ -n "$skipped" ] && echo "# not built:$skipped" >>"$bench_log"
        fi
    fi
    [ -z "$skipped" ] &&
        skipped=$(sed -n 's/^# not built: *//p' "$bench_log" 2>/dev/null | tail -n 1)
    # the formats that ran, in order, from the CSV (format is a name: csv_agg reads it as 0)
    ran=$(awk -F, 'NR > 1 && !seen[$1]++ { printf "%s ", $1 }' "$bench_csv" 2>/dev/null)
    ran=${ran% }
    # $last prints the mean over the seeds of column col on each seed's last row of format f;
    # with sd set, that seed's alone
    last='NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
          $c["format"] == f && (sd == "" || $c["seed"] == sd) { v[$c["seed"]] = $c[col] }
          END { for (k in v) { s += v[k]; n++ } if (n) printf "%.6f\n", s / n }'
    for f in f32 bf16 mxfp8 dynamiq; do
        bench_headline "${f}_final_val_loss" \
            "$(awk -F, -v f="$f" -v col=val_loss_ema "$last" "$bench_csv" 2>/dev/null)"
    done
    for f in f32 bf16 mxfp8 dynamiq; do
        bench_headline "${f}_train_seconds" \
            "$(awk -F, -v f="$f" -v col=seconds "$last" "$bench_csv" 2>/dev/null)"
    done
    for f in dynamiq bf16 mxfp8; do
        rel=$(awk -v a="$(bench_headline_get "${f}_final_val_loss")" \
                  -v b="$(bench_headline_get f32_final_val_loss)" \
              'BEGIN { if (a != "n/a" && b != "n/a" && b > 0) printf "%.5f", a / b - 1 }')
        bench_headline "${f}_final_val_loss_rel_to_f32" "$rel"
    done
    # the trained (not averaged) weights: the noisier figure, for comparison
    rel=$(awk -v a="$(awk -F, -v f=dynamiq -v col=val_loss "$last" "$bench_csv" 2>/dev/null)" \
              -v b="$(awk -F, -v f=f32 -v col=val_loss "$last" "$bench_csv" 2>/dev/null)" \
          'BEGIN { if (a != "" && b != "" && b > 0) printf "%.5f", a / b - 1 }')
    bench_headline dynamiq_final_raw_val_loss_rel_to_f32 "$rel"
    # the noise: dynamiq / f32 - 1 seed by seed (each seed its own validation problem), the
    # smallest and the largest
    for col in min max; do
        rel=$(awk -F, -v want=$col 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
                   $c["format"] == "f32" { a[$c["seed"]] = $c["val_loss_ema"] }
                   $c["format"] == "dynamiq" { b[$c["seed"]] = $c["val_loss_ema"] }
                   END { for (k in b) if ((k in a) && a[k] > 0) { r = b[k] / a[k] - 1
                             if (!n++ || (want == "min" && r < w) || (want == "max" && r > w)) w = r }
                         if (n) printf "%.5f", w }' "$bench_csv" 2>/dev/null)
        bench_headline "dynamiq_rel_to_f32_seed_$col" "$rel"
    done
    bench_target "final validation loss (EMA weights, mean over seeds), dynamiq / f32 - 1, at least" \
        dynamiq_final_val_loss_rel_to_f32 '>=' -0.005
    bench_target "final validation loss (EMA weights, mean over seeds), dynamiq / f32 - 1, at most" \
        dynamiq_final_val_loss_rel_to_f32 '<=' 0.005
    # per seed: the final row of each run, the table
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i
                       print "format,seed,step,seconds,val_loss,val_loss_ema"; next }
             { k = $c["format"] "," $c["seed"]; if (!(k in row)) o[n++] = k
               row[k] = k "," $c["step"] "," $c["seconds"] "," $c["val_loss"] "," $c["val_loss_ema"] }
             END { for (i = 0; i < n; i++) print row[o[i]] }' "$bench_csv" \
        >"$results/$bench_name.final.csv" 2>/dev/null
    bench_table_from "$results/$bench_name.final.csv" format seed step seconds val_loss val_loss_ema
    rel=$(bench_headline_get bf16_final_val_loss_rel_to_f32)
    [ "$rel" != n/a ] &&
        bench_note "for scale: bf16, nearly exact, ends $rel from f32 (mean over the seeds); seed" \
            "by seed dynamiq ends $(bench_headline_get dynamiq_rel_to_f32_seed_min) to" \
            "$(bench_headline_get dynamiq_rel_to_f32_seed_max) from f32"
    [ -n "$skipped" ] &&
        bench_note "not built in this tree, so not run: ${skipped# } (tidal train does not" \
            "know the name); their headlines read n/a"
    bench_note "each format and seed: \`tidal train --model fmnist --data fmnist --steps $steps" \
        "--val-every $val --log-every $val --seed SEED --allreduce FORMAT --ckpt-every 0" \
        "--resume none\` at $np ranks (global batch 64, the defaults otherwise), seeds:" \
        "$(echo $seeds); a seed fixes the initial weights, data order, noise and validation" \
        "problem, the same for every format; --ckpt-every 0 still writes one checkpoint at the" \
        "end, after the last timed step"
    bench_note "seconds = loss.csv's wall time since training started (start-up excluded," \
        "validation included); val_loss = the loss of the trained weights on 256 held-out" \
        "images (fixed times and noise), val_loss_ema = the same for the EMA weights (the ones" \
        "tidal samples from); *_final_val_loss = the last val_loss_ema, mean over the seeds;" \
        "*_train_seconds = the last row's seconds, mean over the seeds;" \
        "*_final_val_loss_rel_to_f32 = final val loss / f32's - 1;" \
        "dynamiq_final_raw_val_loss_rel_to_f32 = the same of val_loss; each run's loss.csv and" \
        "loss.png are in $bench_name.runs/FORMAT-seedSEED/"
    bench_note "links: as allreduce-link (tools/cluster): each rank a host of its own and a device" \
        "of a fixed share of a core, host links through a bridge with a tbf of $link Gbit/s on" \
        "both ends; UCX over TCP on them"
    [ -n "$ran" ] || return 0
    # right: the second half of the steps, where the formats' differences show; the first seed
    v=$(csv_agg max 'step / 2')
    seed=${seeds%% *}
    bench_plot <<GP
height = 520
set multiplot layout 1, 2 title name . ": the fmnist DiT at $np ranks over $link Gbit/s links (seed $seed; EMA weights)"
set xlabel "wall time since training started (s)"
set ylabel "validation loss (lower is better)"
set key top right
set title "all steps"
pick(f) = strcol("format") eq f && column("seed") == $seed ? column("seconds") : NaN
plot for [f in "$ran"] csv using (pick(f)):"val_loss_ema" title f lw 2
set title "steps after ${v:-0}"
late(f) = strcol("format") eq f && column("seed") == $seed && column("step") > ${v:-0} ? column("seconds") : NaN
plot for [f in "$ran"] csv using (late(f)):"val_loss_ema" title f lw 2
unset multiplot
GP
}
