"""The report's GEMM roof: the rates measured, where the JAX-vs-torch gap comes from, the JAX targets."""

from __future__ import annotations

from ..table import Results, fmt, table_rows


def roof_section(res: Results) -> list[str]:
    if not res.roofs:
        return ["## GEMM roof", "", "Not measured in this run.", ""]
    lines = ["## Best GEMM rates measured in this run (the \"roof\")", "",
             "GFLOP/s of the GEMMs each workload needs: the recurrent step GEMM (B x H) x (H x G*H) and the "
             "input projection over all steps (T*B x I) x (I x G*H), with `torch.mm` (MKL / cuBLAS), oneDNN on "
             "a prepacked weight (`torch.ops.mkldnn._linear_pointwise`) and XLA's dot (jitted, same threads), "
             "each the best of five timing windows; `loop`: T dependent step GEMMs inside one compiled loop "
             "(TorchScript, `lax.fori_loop`), the step without per-call dispatch.", "",
             "The roof is the best rate any of the workload's GEMM shapes (forward and backward) reached in "
             "this run: a measured rate, not a proven bound; a rung above 100% of it ran faster than any GEMM "
             "measured here, which the Sanity section flags (the results' GFLOP/s count a forward+backward step "
             "as 3x the forward FLOPs). `roof` takes every library of both "
             "frameworks and judges every rung; `torch roof` and `XLA roof` take each framework's own, split "
             "the JAX-vs-torch gap and set the JAX targets. A tighter roof (the recurrent FLOPs at the step "
             "shape's rate) would say more about batch 1, but a fused RNN kernel (nn.LSTM's oneDNN primitive) "
             "can beat it: the step columns show how far below the roof a small step GEMM "
             "runs. The rates were measured at the start of the run and again at the end, each the better of "
             "the two (`drift`: the largest change of a rate between them).", "",
             "| cell | workload | threads | step GEMM | mm | oneDNN | torch loop | XLA | XLA loop | input GEMM | "
             "mm | oneDNN | XLA | roof | torch roof | XLA roof | roof from | drift |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---|---:|"]
    for (cell, wl, _), r in res.roofs.items():
        g = [fmt(r.get(k), "g") for k in ("step_mm_gflops", "step_onednn_gflops", "step_chain_torch_gflops",
                                          "step_xla_gflops", "step_chain_xla_gflops")]
        i = [fmt(r.get(k), "g") for k in ("input_mm_gflops", "input_onednn_gflops", "input_xla_gflops")]
        roofs = [fmt(r.get(f"roof_{fw}_gflops"), "g") for fw in ("machine", "torch", "xla")]
        drift = (f"{r['roof_drift']:.0%}" + (" ⚠" if r["roof_drift"] > ROOF_DRIFT else "")
                 if r.get("roof_passes", 1) > 1 else "once")
        lines.append(f"| {cell} | {wl} | {r.get('threads', '')} | {'x'.join(map(str, r['step_shape']))} | "
                     + " | ".join(g) + f" | {'x'.join(map(str, r['input_shape']))} | " + " | ".join(i) + " | "
                     + " | ".join(roofs) + f" | {r.get('roof_machine_from') or ''} | {drift} |")
    lines += ["", "(shapes M x K x N; GFLOP/s)", ""]
    if any(r.get("roof_drift", 0) > ROOF_DRIFT for r in res.roofs.values()):
        lines += [f"⚠ Some GEMM rates moved by more than {ROOF_DRIFT:.0%} between the start and the end of the "
                  "run: the machine was not in the same state throughout; the roof keeps the better rate.", ""]
    return lines + gap_lines(res)


ROOF_DRIFT = 0.25  # a GEMM rate that moves more than this between start and end: the machine changed


def best_row(rows: list[dict], cell: str, workload: str, framework: str, phase: str = "train") -> dict | None:
    """The fastest trusted main-group row of a framework (float32, ok, time not suspect)."""
    cands = [r for r in rows if r["group"] == "main" and r["cell"] == cell and r["workload"] == workload
             and r["framework"] == framework and r["status"] == "ok" and r["dtype"] == "float32"
             and r.get(f"{phase}_ms") is not None and not r.get("time_suspect")]
    return min(cands, key=lambda r: r[f"{phase}_ms"]) if cands else None


def gap_lines(res: Results) -> list[str]:
    """Per cell and workload: the best JAX rung's fwd+bwd time over the best torch rung's, split
    into the GEMM libraries' part (torch roof / XLA roof) and the rest (loop, autodiff, fusion)."""
    rows = table_rows(res)
    out = []
    for (cell, wl, _), roof in res.roofs.items():
        if not roof.get("roof_xla_gflops") or not roof.get("roof_torch_gflops"):
            continue
        best = {fw: best_row(rows, cell, wl, fw) for fw in ("torch", "jax")}
        if None in best.values():
            continue
        ratio = best["jax"]["train_ms"] / best["torch"]["train_ms"]
        library = roof["roof_torch_gflops"] / roof["roof_xla_gflops"]
        out.append(f"| {cell} | {wl} | {best['torch']['impl']} | {best['jax']['impl']} | {ratio:.2f}x | "
                   f"{library:.2f}x | {ratio / library:.2f}x |")
    if not out:
        return []
    return ["Where the JAX-vs-torch gap comes from (forward+backward, best rung of each): the gap is the "
            "product of the GEMM libraries' part (torch's roof over XLA's) and the rest (the "
            "rungs' loops, autodiff and fusion around their GEMMs). Below 1x: JAX is faster.", "",
            "| cell | workload | best torch | best JAX | JAX / torch | GEMM library | the rest |",
            "|---|---|---|---|---:|---:|---:|"] + out + [""]


# The JAX targets at the first workload's forward+backward (docs/study.md).
JAX_TARGET_X_NATIVE = 1.1
JAX_TARGET_ROOF = 0.8


def jax_targets_section(res: Results) -> list[str]:
    """At the first roofed main workload (S1), forward+backward: is the best JAX rung within
    1.1x of nn.LSTM / nn.GRU and at 80% of XLA's roof, and jax.scan's fraction of that roof;
    where a target is missed, which part is responsible (XLA's GEMMs or the rung's structure)."""
    rows = table_rows(res)
    main = [r for r in rows if r["group"] == "main"]
    workloads = [w for w in dict.fromkeys(r["workload"] for r in main)
                 if any(k[1] == w and v.get("roof_xla_gflops") for k, v in res.roofs.items())]
    if not workloads:
        return []
    wl = workloads[0]
    lines = [f"## The JAX targets ({wl}, forward+backward)", "",
             f"Targets: the best JAX rung at most {JAX_TARGET_X_NATIVE}x torch.native (nn.LSTM / nn.GRU) and at "
             f"least {JAX_TARGET_ROOF:.0%} of XLA's own roof; `jax.scan`'s fraction of that roof (moonshot "
             f"{JAX_TARGET_ROOF:.0%}). The ratio to nn.LSTM factors into the rung's structure (its fraction of "
             "XLA's roof), XLA's GEMMs (XLA's roof over the machine roof) and nn.LSTM's own fraction of the "
             "machine roof: JAX / native = native fraction / (JAX fraction of XLA roof x XLA roof / machine "
             "roof). `responsible` names the larger loss where a target is missed.", "",
             "| cell | rung | ×native | target | of XLA roof | target | XLA roof / roof | native of roof | "
             "responsible |", "|---|---|---:|---|---:|---|---:|---:|---|"]
    for cell in dict.fromkeys(r["cell"] for r in main if r["workload"] == wl):
        best = best_row(rows, cell, wl, "jax")
        roof = res.roofs.get((cell, wl, best["device"]), {}) if best else {}
        if not roof.get("roof_machine_gflops") or not roof.get("roof_xla_gflops"):
            continue
        scan, native = (next((r for r in main if r["impl"] == impl and r["cell"] == cell and r["workload"] == wl
                              and r["dtype"] == "float32" and r["status"] == "ok"), None)
                        for impl in ("jax.scan", "torch.native"))
        library = roof["roof_xla_gflops"] / roof["roof_machine_gflops"]
        for r, label in ((best, "best JAX"), (scan, "jax.scan")):
            if r is None or (label == "jax.scan" and r is best):
                continue
            x, frac = r.get("train_x_native"), r.get("own_roof_fraction_train")
            met_x = x is not None and x <= JAX_TARGET_X_NATIVE
            met_f = frac is not None and frac >= JAX_TARGET_ROOF
            if met_x and met_f:
                why = "both met"
            elif frac is None:
                why = "n/a"
            else:
                structure, gemms = 1 / frac, 1 / library
                why = (f"structure ({structure:.2f}x lost to its own roof)" if structure >= gemms
                       else f"XLA's GEMMs ({gemms:.2f}x below the best library)")
            lines.append(f"| {cell} | {r['impl']} ({label}) | {fmt(x, 'x')} | "
                         f"{'met' if met_x else 'missed'} (<= {JAX_TARGET_X_NATIVE}x) | {fmt(frac, '%')} | "
                         f"{'met' if met_f else 'missed'} (>= {JAX_TARGET_ROOF:.0%}) | {library:.2f}x | "
                         f"{fmt(native and native.get('roof_fraction_train'), '%')} | {why} |")
    return lines + [""]
