"""Summary table and plots of a sweep, from the small aggregates Spark returns.

The plots are box plots drawn from approximate quantiles (5/25/50/75/95 %)
that Spark computes per (cluster size, fault rate), not from the raw rows:
the driver never collects a sweep's rows, so this works the same for a
hundred scenarios and for a hundred million.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

TABLE_COLUMNS: tuple[tuple[str, str, str], ...] = (
    # (key, header, format)
    ("nodes", "nodes", "d"),
    ("faults_per_run", "faults", "d"),
    ("fault_rate", "ev/1kt", ".2f"),
    ("scenarios", "scenarios", ",d"),
    ("failures", "viol", "d"),
    ("committed_mean", "committed", ".1f"),
    ("elections_mean", "elections", ".2f"),
    ("no_leader", "no-ldr", "d"),
    ("first_leader_p50", "1st-ldr p50", "d"),
    ("first_leader_p99", "1st-ldr p99", "d"),
    ("latency_p50_median", "lat p50", "d"),
    ("latency_p99_median", "lat p99", "d"),
    ("latency_p99_p99", "lat p99^99", "d"),
    ("sent_mean", "sent", ".0f"),
    ("dropped_mean", "dropped", ".1f"),
    ("drop_pct", "drop%", ".2f"),
)


def _fmt(value: Any, spec: str) -> str:
    if value is None:
        return "-"
    return format(value, spec)


def format_table(cells: Sequence[dict[str, Any]]) -> str:
    """Fixed-width text table, one line per (nodes, faults-per-run) cell."""
    header = [h for _, h, _ in TABLE_COLUMNS]
    body = [[_fmt(c.get(k), f) for k, _, f in TABLE_COLUMNS] for c in cells]
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)) for r in body]
    lines.append(
        "ticks: 1st-ldr = ticks to the first established leader; lat p50/p99 = median over scenarios of each "
        "scenario's commit latency p50/p99; lat p99^99 = 99th percentile of the scenarios' p99"
    )
    return "\n".join(lines)


def format_streams(streams: dict[str, int]) -> str:
    """The pipeline variant's line on streamed SNAPs: how often a crash or a
    cut came in the middle of one, or of an install (a sweep shows these
    cases happen)."""
    s = streams
    return (
        f"streamed SNAPs: {s['snap_transfers']:,} sent; in flight when their sender crashed "
        f"{s['snaps_cut_sender']:,}, their receiver crashed {s['snaps_cut_receiver']:,}, a cut broke the link "
        f"{s['snaps_cut_link']:,}; installs {s['installs']:,}, cut by a crash {s['installs_cut']:,}; "
        f"longer than the election timeout {s['snaps_long']:,}, installed without an election "
        f"{s['snaps_long_installed']:,}"
    )


def _box(q: Sequence[float] | None, label: str) -> dict[str, Any] | None:
    if not q or any(v is None for v in q):
        return None
    lo, q1, med, q3, hi = q
    return {"whislo": lo, "q1": q1, "med": med, "q3": q3, "whishi": hi, "fliers": [], "label": label}


def _boxes_panel(ax: Any, dist: Sequence[dict[str, Any]], key: str, title: str, ylabel: str) -> None:
    """Boxes grouped by fault rate (x), one colour per cluster size."""
    from matplotlib.patches import Patch

    rates = sorted({d["faults_per_run"] for d in dist})
    sizes = sorted({d["nodes"] for d in dist})
    colours = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C"]
    width = 0.8 / max(1, len(sizes))
    drawn = False
    for si, n in enumerate(sizes):
        stats, pos = [], []
        for ri, f in enumerate(rates):
            for d in dist:
                if d["nodes"] == n and d["faults_per_run"] == f:
                    b = _box(d.get(key), "")
                    if b is not None:
                        stats.append(b)
                        pos.append(ri + (si - (len(sizes) - 1) / 2) * width)
        if stats:
            drawn = True
            art = ax.bxp(
                stats,
                positions=pos,
                widths=width * 0.9,
                patch_artist=True,
                showfliers=False,
                medianprops={"color": "black", "linewidth": 2},
            )
            for patch in art["boxes"]:
                patch.set_facecolor(colours[si % len(colours)])
    ax.set_xticks(range(len(rates)))
    ax.set_xticklabels([str(f) for f in rates])
    ax.set_xlabel("faults per run")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    if drawn:
        ax.legend(
            handles=[Patch(color=colours[i % len(colours)], label=f"{n} nodes") for i, n in enumerate(sizes)],
            fontsize="small",
        )
    else:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)


def write_plots(dist: Sequence[dict[str, Any]], out_dir: str) -> list[str]:
    """latency.png and election.png in ``out_dir``; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    caption = "boxes: 25-75 %, whiskers: 5-95 % of scenarios (Spark approximate quantiles)"
    panels = (
        ("latency.png", "Commit latency",
         (("latency_p50", "commit latency p50 per scenario", "ticks"),
          ("latency_p99", "commit latency p99 per scenario", "ticks"))),
        ("election.png", "Election time",
         (("first_leader_tick", "ticks to the first established leader", "ticks"),
          ("elections", "leaders established per run", "elections"))),
    )  # fmt: skip
    paths = []
    for name, title, columns in panels:
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
        for ax, (column, label, unit) in zip(axes, columns, strict=True):
            _boxes_panel(ax, dist, column, label, unit)
        fig.suptitle(f"{title} by cluster size and fault rate\n" + caption, fontsize="medium")
        fig.tight_layout()
        paths.append(os.path.join(out_dir, name))
        fig.savefig(paths[-1], dpi=100)
        plt.close(fig)
    return paths
