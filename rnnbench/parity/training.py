"""Identical training in PyTorch and JAX: the same model, batches and start, two optimizer stacks.

For each configuration in `CONFIGS` every available torch backend
(`rnnbench.torch.train`, torch.optim + clip_grad_norm_) and every available jax impl
(`rnnbench.jax.train`, optax) trains the same RNN + linear head from the same canonical
parameters on the same batches (`rnnbench.core.tasks`).  The report holds

- the float64 loss curves and the largest step-wise relative difference between any
  two implementations (the parity claim: <= FLOAT64_RTOL = 1e-9 over 100 steps);
- the float32 drift: each framework's fastest implementation trained in float32,
  compared with the float64 curve and with each other (measured, bounded sanely by
  FLOAT32_BOUND, not a precision claim);
- ||dL/dh_t|| at t = 1, T/2, T for every implementation (a vanishing-gradient table that
  hand-written RNNs often print with different numbers per implementation; here they must
  be the same), at the
  initial and at the trained parameters;
- the cost of stock `optax.clip_by_global_norm` against torch's clip formula;
- the first step checked against the float64 NumPy reference (`rnnbench.reference`): the
  loss and the global gradient norm before the first update, which every implementation
  must reproduce to FLOAT64_RTOL.  Agreement between implementations alone would not
  catch two trainers that both train another cell (a GRU for `gru_reset_before`, say).

The custom cells of the catalogue (`rnnbench.core.catalogue.CUSTOM_CELLS`) each have a tiny
configuration (`CUSTOM_CONFIGS`): only the implementations that support the cell train it
(the registry's `cells`); the others are listed in the report with their reason.

Imports torch and jax (through the train modules) only when `run` is called.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rnnbench.core.tasks import TrainConfig, relative_difference

FLOAT64_RTOL = 1e-9  # step-wise relative agreement of float64 loss curves
FLOAT32_BOUND = 1e-3  # sane bound for the float32 drift over the run (measured, reported)

CONFIGS = {
    # The adding problem at T=50 (Hochreiter & Schmidhuber), LSTM, Adam.
    "adding-lstm-adam": TrainConfig(task="adding", seq_len=50, cell="lstm", hidden_size=8, batch_size=16,
                                    optimizer="adam", lr=1e-2, clip_norm=1.0),
    # Sine forecasting with variable lengths (packed sequences), GRU, SGD with momentum.
    "sine-gru-sgd": TrainConfig(task="sine", seq_len=20, cell="gru", hidden_size=8, batch_size=16,
                                optimizer="sgd", lr=0.1, momentum=0.9, clip_norm=0.5),
}
# The catalogue's custom cells: tiny (H=4, B=8, T<=16) so that every implementation pair
# stays cheap; between them they cover both tasks (full length and packed sequences), both
# optimizers and both clipping branches.
CUSTOM_CONFIGS = {
    "sine-ln_lstm-sgd": TrainConfig(task="sine", seq_len=12, cell="ln_lstm", hidden_size=4, batch_size=8,
                                    optimizer="sgd", lr=0.1, momentum=0.9, clip_norm=0.5),
    "adding-peephole_lstm-adam": TrainConfig(task="adding", seq_len=16, cell="peephole_lstm", hidden_size=4,
                                             batch_size=8, optimizer="adam", lr=2e-2, clip_norm=1.0),
    "adding-gru_reset_before-adam": TrainConfig(task="adding", seq_len=16, cell="gru_reset_before",
                                                hidden_size=4, batch_size=8, optimizer="adam", lr=2e-2,
                                                clip_norm=1.0),
}
CONFIGS.update(CUSTOM_CONFIGS)
GRAD_NORM_CONFIG = "adding-lstm-adam"
FAST = {"torch": ("native", "eager"), "jax": ("scan",)}  # preferred for float32 drift, first available


def available(framework: str) -> list[str]:
    """Backends that run on the CPU here, in ladder order."""
    from rnnbench.core.registry import framework as framework_adapter
    return list(framework_adapter(framework).available_backends("cpu"))


def trainer(framework: str):
    """The framework's training module (`train`, `hidden_grad_norms`, `evaluate_mse`)."""
    from rnnbench.core.registry import framework as framework_adapter
    return framework_adapter(framework).trainer()


def implementations(impls: Sequence[str] | None = None) -> list[str]:
    """Registry-style names ("torch.eager", "jax.scan") of everything that can train here."""
    names = [f"{fw}.{k}" for fw in ("torch", "jax") for k in available(fw)]
    if impls is not None:
        names = [n for n in names if n in impls]
    return names


def unsupported_reason(name: str, config: TrainConfig, dtype: str = "float64") -> str | None:
    """Why implementation `name` cannot train `config` (its declaration and adapter), or None."""
    from rnnbench.core import registry
    has_lengths = config.make_task().batch(0, 1).lengths is not None
    return registry.get(name).unsupported_reason(config.spec(), lengths=has_lengths, dtype=dtype)


def train(name: str, config: TrainConfig, dtype: str = "float64", **kwargs):
    framework, key = name.split(".", 1)
    return trainer(framework).train(config, key, dtype, **kwargs)


def hidden_grad_norms(name: str, config: TrainConfig, steps: Sequence[int], **kwargs) -> dict[int, float]:
    framework, key = name.split(".", 1)
    return trainer(framework).hidden_grad_norms(config, key, steps, **kwargs)


def grad_norm_steps(config: TrainConfig) -> tuple[int, int, int]:
    T = config.seq_len
    return (1, T // 2, T)


def reference_first_step(config: TrainConfig) -> tuple[float, float]:
    """(loss, global gradient norm) of the first step, from the float64 NumPy reference.

    The model of `TrainConfig` at its initial parameters on batch 0: the RNN output at each
    sequence's last valid step (reverse direction: step 0) through the linear head,
    L = mean((pred - y)^2).  Its gradient flows into the RNN as the cotangent of the output
    at those steps:  dL/dpred = 2 (pred - y) / B,  dL/dfeatures = dL/dpred W_head,
    dL/dW_head = dL/dpred^T features,  dL/db_head = sum_b dL/dpred;  the RNN parameters'
    gradients come from `reference.backward`.  The norm is over every trained parameter,
    as `clip_grad_norm_` takes it.
    """
    from rnnbench import reference
    spec = config.spec()
    rnn, head = config.initial_params()
    batch = config.make_task().batch(0, config.batch_size)
    x = batch.x.transpose(1, 0, 2) if spec.batch_first else batch.x
    fwd = reference.forward(spec, rnn, x, lengths=batch.lengths)
    out = fwd.output.transpose(1, 0, 2) if spec.batch_first else fwd.output  # time-major
    rows, last = np.arange(batch.batch_size), batch.last_index()
    H = spec.output_hidden_size
    features = out[last, rows]
    if spec.bidirectional:
        features = np.concatenate([features[:, :H], out[0, :, H:]], axis=-1)
    pred = features @ head["weight"].T + head["bias"]
    loss = float(np.mean((pred - batch.y) ** 2))
    d_pred = 2.0 * (pred - batch.y) / pred.size
    d_features = d_pred @ head["weight"]
    d_out = np.zeros_like(out)
    d_out[last, rows, :H] = d_features[:, :H]
    if spec.bidirectional:
        d_out[0, :, H:] += d_features[:, H:]
    cot = {"output": d_out.transpose(1, 0, 2) if spec.batch_first else d_out, "h_n": np.zeros_like(fwd.h_n)}
    if fwd.c_n is not None:
        cot["c_n"] = np.zeros_like(fwd.c_n)
    grads = reference.backward(spec, fwd, cot)
    squares = sum(float(np.sum(grads[f"grad/{n}"] ** 2)) for n in rnn)
    squares += float(np.sum((d_pred.T @ features) ** 2)) + float(np.sum(d_pred.sum(axis=0) ** 2))
    return loss, float(np.sqrt(squares))


def first_step_vs_reference(runs: dict, config: TrainConfig) -> dict:
    """Each run's first loss and pre-clip gradient norm against `reference_first_step`."""
    loss, norm = reference_first_step(config)
    rel = {n: max(float(relative_difference(r.losses[0], loss)), float(relative_difference(r.grad_norms[0], norm)))
           for n, r in runs.items()}
    return {"loss": loss, "grad_norm": norm, "max_rel": rel, "worst": max(rel.values(), default=0.0)}


def pairwise_max_rel(curves: dict[str, np.ndarray]) -> dict[tuple[str, str], float]:
    names = list(curves)
    return {(a, b): float(relative_difference(curves[a], curves[b]).max())
            for i, a in enumerate(names) for b in names[i + 1:]}


def fastest(names: Sequence[str], framework: str) -> str | None:
    for key in FAST[framework]:
        if f"{framework}.{key}" in names:
            return f"{framework}.{key}"
    return next((n for n in names if n.startswith(framework + ".")), None)


def run(impls: Sequence[str] | None = None, steps: int = 100, configs: dict[str, TrainConfig] | None = None,
        float32: bool = True, grad_norms: bool = True) -> dict:
    """Run every configuration for every implementation; return the report (JSON-ready)."""
    from dataclasses import replace
    all_names = implementations(impls)
    configs = {k: replace(c, steps=steps) for k, c in (configs or CONFIGS).items()}
    report = {"float64_rtol": FLOAT64_RTOL, "float32_bound": FLOAT32_BOUND, "implementations": all_names,
              "configs": {}, "ok": True}
    for cname, config in configs.items():
        skipped = {n: r for n in all_names if (r := unsupported_reason(n, config)) is not None}
        names = [n for n in all_names if n not in skipped]
        runs, failed = {}, {}
        for n in names:
            try:
                runs[n] = train(n, config, "float64")
            except Exception as e:  # one implementation's crash is a recorded failure, not a lost report
                failed[n] = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"
        names = [n for n in names if n in runs]
        curves = {n: r.losses for n, r in runs.items()}
        pairs = pairwise_max_rel(curves)
        worst = max(pairs.items(), key=lambda kv: kv[1]) if pairs else (None, 0.0)
        entry = {
            "config": config.to_dict(),
            "seconds": {n: r.seconds for n, r in runs.items()},
            "losses": {n: r.losses.tolist() for n, r in runs.items()},
            "first_loss": float(curves[names[0]][0]) if names else None,
            "last_loss": float(curves[names[0]][-1]) if names else None,
            "clipped_steps": {n: int(r.clipped.sum()) for n, r in runs.items()},
            "max_rel_float64": worst[1],
            "worst_pair": list(worst[0]) if worst[0] else None,
            "not_supported": skipped,
            "failed": failed,
            "reference_first_step": first_step_vs_reference(runs, config),
        }
        # a configuration no selected implementation supports is reported "not trained", with each reason
        entry["ok"] = bool(worst[1] <= FLOAT64_RTOL and entry["reference_first_step"]["worst"] <= FLOAT64_RTOL
                           and not failed)
        if float32 and names:
            entry["float32"] = _float32_drift(config, names, curves)
            entry["ok"] = entry["ok"] and all(v <= FLOAT32_BOUND for v in entry["float32"]["max_rel"].values())
        report["configs"][cname] = entry
        report["ok"] = report["ok"] and entry["ok"]
        if grad_norms and cname == GRAD_NORM_CONFIG:
            report["grad_norms"] = _grad_norm_table(config, names, runs)
            report["ok"] = report["ok"] and report["grad_norms"]["max_rel"] <= FLOAT64_RTOL
    return report


def _float32_drift(config: TrainConfig, names: Sequence[str], curves64: dict[str, np.ndarray]) -> dict:
    picks = [p for p in (fastest(names, "torch"), fastest(names, "jax")) if p]
    curves32 = {n: train(n, config, "float32").losses for n in picks}
    ref64 = curves64[names[0]]
    max_rel = {f"{n} float32 vs float64": float(relative_difference(c, ref64).max()) for n, c in curves32.items()}
    if len(picks) == 2:
        max_rel[f"{picks[0]} vs {picks[1]} (float32)"] = float(
            relative_difference(curves32[picks[0]], curves32[picks[1]]).max())
    return {"implementations": picks, "max_rel": max_rel}


def _grad_norm_table(config: TrainConfig, names: Sequence[str], runs: dict) -> dict:
    steps = grad_norm_steps(config)
    table = {}
    for n in names:
        table[n] = {"init": hidden_grad_norms(n, config, steps),
                    "trained": hidden_grad_norms(n, config, steps, rnn_params=runs[n].params,
                                                 head_params=runs[n].head)}
    ref = table[names[0]]
    worst = 0.0
    for n in names:
        for when in ("init", "trained"):
            a = np.array([table[n][when][t] for t in steps])
            b = np.array([ref[when][t] for t in steps])
            worst = max(worst, float(relative_difference(a, b).max()))
    return {"steps": list(steps), "table": {n: {w: {str(t): v for t, v in d.items()} for w, d in tw.items()}
                                            for n, tw in table.items()},
            "max_rel": worst}


# ---- rendering -------------------------------------------------------------------------------

def markdown(report: dict) -> list[str]:
    lines = ["## Identical training: torch.optim vs optax", "",
             f"Same RNN + linear head, same initial canonical parameters, same batches; float64 loss curves must "
             f"agree step by step to {report['float64_rtol']:g} relative between every pair of implementations, "
             f"and the first step's loss and gradient norm must match the float64 NumPy reference to the same "
             f"tolerance.", ""]
    lines += ["| configuration | steps | loss first → last | clipped steps | max rel. diff (float64, all pairs) "
              "| first step vs reference (max rel.) | float32 drift (max rel.) | implementations |",
              "|---|---|---|---|---|---|---|---|"]
    for cname, e in report["configs"].items():
        c = e["config"]
        clipped = sorted(set(e["clipped_steps"].values()))
        drift = "; ".join(f"{k}: {v:.1e}" for k, v in e.get("float32", {}).get("max_rel", {}).items())
        ref = e.get("reference_first_step", {}).get("worst")
        if not e["losses"]:
            lines.append(f"| {cname} | {c['steps']} | not trained | | | | | 0 |")
            continue
        lines.append(f"| {cname} (T={c['seq_len']}, H={c['hidden_size']}, B={c['batch_size']}) | {c['steps']} | "
                     f"{e['first_loss']:.4f} → {e['last_loss']:.4f} | {', '.join(map(str, clipped))} | "
                     f"{e['max_rel_float64']:.1e} | {'n/a' if ref is None else f'{ref:.1e}'} | {drift} | "
                     f"{_impl_list(list(e['losses']))} |")
    lines.append("")
    for (n, reason), cnames in not_trained(report).items():
        lines.append(f"- `{n}` not trained on {', '.join(cnames)}: {reason}")
    for cname, e in report["configs"].items():
        for n, error in e.get("failed", {}).items():
            lines.append(f"- **FAILED** `{n}` on {cname}: {error}")
    lines.append("")
    if "grad_norms" in report:
        g = report["grad_norms"]
        steps = g["steps"]
        lines += [f"||dL/dh_t|| on the first batch ({GRAD_NORM_CONFIG}), at the initial and the trained parameters "
                  f"(max relative spread across implementations: {g['max_rel']:.1e}):", ""]
        header = ["implementation"] + [f"init t={t}" for t in steps] + [f"trained t={t}" for t in steps]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for n, row in g["table"].items():
            vals = [f"{row['init'][str(t)]:.6e}" for t in steps] + [f"{row['trained'][str(t)]:.6e}" for t in steps]
            lines.append(f"| {n} | " + " | ".join(vals) + " |")
        lines.append("")
    return lines


def not_trained(report: dict) -> dict[tuple[str, str], list[str]]:
    """(implementation, reason) -> the configurations it did not train for that reason."""
    out: dict[tuple[str, str], list[str]] = {}
    for cname, e in report["configs"].items():
        for n, reason in e.get("not_supported", {}).items():
            out.setdefault((n, reason), []).append(cname)
    return out


def _impl_list(names: list[str]) -> str:
    """A short list of implementations: all of them when few, else how many."""
    return ", ".join(names) if len(names) <= 5 else str(len(names))


def render(report: dict, console) -> None:
    from rich.table import Table
    table = Table(title=f"identical training, float64 loss curves (must agree to {report['float64_rtol']:g} rel.)",
                  title_justify="left")
    for col in ("configuration", "steps", "loss first → last", "max rel. diff (all pairs)",
                "first step vs reference", "float32 drift", "seconds per implementation"):
        table.add_column(col, overflow="fold")
    for cname, e in report["configs"].items():
        style = "green" if e["ok"] else "bold red"
        if not e["losses"]:
            table.add_row(cname, str(e["config"]["steps"]), f"[{style}]not trained[/{style}]", "", "", "", "")
            continue
        drift = "\n".join(f"{k}: {v:.1e}" for k, v in e.get("float32", {}).get("max_rel", {}).items())
        secs = "\n".join(f"{n}: {s:.1f}" for n, s in e["seconds"].items())
        ref = e.get("reference_first_step", {}).get("worst")
        table.add_row(cname, str(e["config"]["steps"]), f"{e['first_loss']:.4f} → {e['last_loss']:.4f}",
                      f"[{style}]{e['max_rel_float64']:.1e}[/{style}]",
                      "n/a" if ref is None else f"[{style}]{ref:.1e}[/{style}]", drift, secs)
    console.print(table)
    for (n, reason), cnames in not_trained(report).items():
        console.print(f"[grey50]{n} not trained on {', '.join(cnames)}: {reason}[/grey50]")
    for cname, e in report["configs"].items():
        for n, error in e.get("failed", {}).items():
            console.print(f"[bold red]{n} FAILED on {cname}: {error}[/bold red]")
    if "grad_norms" in report:
        g = report["grad_norms"]
        t = Table(title=f"||dL/dh_t|| ({GRAD_NORM_CONFIG}, first batch); max rel. spread {g['max_rel']:.1e}",
                  title_justify="left")
        t.add_column("implementation")
        for when in ("init", "trained"):
            for s in g["steps"]:
                t.add_column(f"{when} t={s}", justify="right")
        for n, row in g["table"].items():
            t.add_row(n, *[f"{row[w][str(s)]:.6e}" for w in ("init", "trained") for s in g["steps"]])
        console.print(t)
