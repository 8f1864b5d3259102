"""The report's figures (matplotlib, Agg backend: no display needed).

- `ratio_to_native.png`: time / torch.native time per implementation and workload
  (forward and forward+backward, one row of panels per cell; log scale, 1 = native);
- `time_vs_seq_len.png`, `time_vs_batch.png`: fwd+bwd time against T and B (sweeps);
- `ladder_<cell>.png`: each rung's fwd+bwd time with the speedup it buys over the rung below.

Each function returns the path it wrote, or None when the results hold no data for it.
"""

from __future__ import annotations

from pathlib import Path

from .table import NATIVE, Results, ladder, table_rows


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _plain_log_axis(axis) -> None:
    """Log scale with plain numbers (0.5, 2, 30) instead of powers of ten."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(FuncFormatter(lambda v, _: ""))


def plot_ratio_to_native(res: Results, path: Path) -> Path | None:
    rows = [r for r in table_rows(res) if r["group"] == "main"
            and (r["forward_x_native"] is not None or r["train_x_native"] is not None)]
    if not rows:
        return None
    plt = _plt()
    cells = sorted({r["cell"] for r in rows})
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    impls = sorted(dict.fromkeys(r["impl"] for r in rows),
                   key=lambda n: next(((r["framework"] != "torch", r["rung"] or 0) for r in rows if r["impl"] == n)))
    fig, axes = plt.subplots(2 * len(cells), 1, figsize=(max(8, 0.45 * len(impls) * len(workloads) + 3),
                                                          3.4 * 2 * len(cells)), squeeze=False)
    width = 0.8 / max(1, len(workloads))
    for i, cell in enumerate(cells):
        for j, (key, label) in enumerate([("forward_x_native", "forward"), ("train_x_native", "forward+backward")]):
            ax = axes[2 * i + j][0]
            for k, w in enumerate(workloads):
                xs, ys = [], []
                for n, impl in enumerate(impls):
                    match = [r for r in rows if r["impl"] == impl and r["cell"] == cell and r["workload"] == w]
                    if match and match[0][key] is not None:
                        xs.append(n + (k - (len(workloads) - 1) / 2) * width)
                        ys.append(match[0][key])
                bars = ax.bar(xs, ys, width, label=w)
                ax.bar_label(bars, labels=[f"{y:.1f}" for y in ys], fontsize=6, padding=1)
            ax.axhline(1.0, color="black", lw=0.8, ls="--")
            ax.margins(y=0.12)  # room for the bar labels
            ax.set_yscale("log")
            _plain_log_axis(ax.yaxis)
            ax.set_xticks(range(len(impls)), impls, rotation=40, ha="right", fontsize=8)
            ax.set_ylabel(f"time / {NATIVE} (lower is faster)")
            ax.set_title(f"{cell.upper()} {label}")
            ax.legend(fontsize=7, title="workload", title_fontsize=7)
    fig.suptitle("Time relative to torch.native (same run)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_sweep(res: Results, group: str, size_key: str, xlabel: str, path: Path) -> Path | None:
    rows = [m for m in res.measurements if m.get("group") == group and m.get("train_s") is not None]
    if not rows:
        return None
    plt = _plt()
    cells = sorted({m["cell"] for m in rows})
    fig, axes = plt.subplots(1, 2 * len(cells), figsize=(6.5 * len(cells) * 2 / 1.6, 4), squeeze=False)
    for i, cell in enumerate(cells):
        for j, (key, label) in enumerate([("forward_s", "forward"), ("train_s", "forward+backward")]):
            ax = axes[0][2 * i + j]
            for impl in dict.fromkeys(m["impl"] for m in rows if m["cell"] == cell):
                pts = sorted((m["workload"][size_key], 1e3 * m[key]) for m in rows
                             if m["impl"] == impl and m["cell"] == cell and m.get(key) is not None)
                if pts:
                    ax.plot(*zip(*pts), marker="o", label=impl)
            ax.set_xscale("log")
            ax.set_yscale("log")
            _plain_log_axis(ax.xaxis)
            _plain_log_axis(ax.yaxis)
            ax.set_xlabel(xlabel)
            ax.set_ylabel("median time, ms")
            base = rows[0]["workload"]
            fixed = {k: v for k, v in base.items() if k not in ("name", size_key)}
            ax.set_title(f"{cell.upper()} {label}\n" + ", ".join(f"{k}={v}" for k, v in fixed.items()), fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_time_vs_seq_len(res: Results, path: Path) -> Path | None:
    return _plot_sweep(res, "sweep-seq_len", "seq_len", "sequence length T", path)


def plot_time_vs_batch(res: Results, path: Path) -> Path | None:
    return _plot_sweep(res, "sweep-batch", "batch", "batch size B", path)


def plot_ladder(res: Results, cell: str, path: Path, workload: str | None = None) -> Path | None:
    workload, rows = ladder(res, cell, workload)
    rows = [r for r in rows if r["train_ms"] is not None and r["forward_ms"] is not None]
    if not rows:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(7, 0.9 * len(rows) + 2), 4.5))
    colors = {"torch": "tab:orange", "jax": "tab:blue"}
    xs = range(len(rows))
    train = [r["train_ms"] for r in rows]
    fwd = [r["forward_ms"] for r in rows]
    ax.bar([x - 0.2 for x in xs], fwd, 0.4, color=[colors.get(r["framework"], "gray") for r in rows], alpha=0.45,
           label="forward")
    bars = ax.bar([x + 0.2 for x in xs], train, 0.4, color=[colors.get(r["framework"], "gray") for r in rows],
                  label="forward+backward")
    labels = []
    for r in rows:
        text = f"{r['train_ms']:.0f} ms" if r["train_ms"] >= 100 else f"{r['train_ms']:.3g} ms"
        if r["speedup_train"] is not None:
            up = r["speedup_train"]
            text += f"\n{up:.2f}x faster" if up >= 1 else f"\n{1 / up:.2f}x slower"
        labels.append(text)
    ax.bar_label(bars, labels=labels, fontsize=7, padding=2)
    ax.set_yscale("log")
    _plain_log_axis(ax.yaxis)
    ax.set_xticks(list(xs), [r["impl"] for r in rows], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("median time, ms (log)")
    w = next((m["workload"] for m in res.measurements if m["workload_name"] == workload), None)
    sizes = f"T={w['seq_len']}, B={w['batch']}, I={w['input_size']}, H={w['hidden_size']}" if w else ""
    ax.set_title(f"The {cell.upper()} ladder on {workload} ({sizes}): what each rung buys")
    ax.margins(y=0.25)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
