"""An independent float64 reference of the mismatch metrics, written sequence by sequence with
plain Python loops — deliberately unlike the vectorised implementation it checks."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

CLAMP = 20.0


def _clamp(x: float, lo: float = -CLAMP, hi: float = CLAMP) -> float:
    if math.isnan(x):
        return x
    return min(max(x, lo), hi)


def sequences(
    lr: np.ndarray, lt: np.ndarray, mask: np.ndarray | None
) -> list[list[tuple[float, float, int]]]:
    """[(lR, lT, flat token position)] per sequence that has at least one valid token."""
    out = []
    for i in range(lr.shape[0]):
        seq = [
            (float(lr[i, j]), float(lt[i, j]), i * lr.shape[1] + j)
            for j in range(lr.shape[1])
            if mask is None or mask[i, j]
        ]
        if seq:
            out.append(seq)
    return out


def reference(
    lr: np.ndarray,
    lt: np.ndarray,
    mask: np.ndarray | None = None,
    *,
    new: np.ndarray | None = None,
    adv: np.ndarray | None = None,
    ent: np.ndarray | None = None,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    cap: float = 2.0,
    seq_cap: float = 5.0,
    geo: tuple[float, float] = (0.999, 1.001),
    edges: tuple[float, ...] = (0.0, 1e-4, 1e-3, 1e-2, 1e-1, 0.5, 0.9, 1.0),
) -> dict[str, Any]:
    lr = np.asarray(lr, dtype=np.float64)
    lt = np.asarray(lt, dtype=np.float64)
    seqs = sequences(lr, lt, mask)
    tokens = [tok for seq in seqs for tok in seq]
    n = len(tokens)
    if n == 0:
        return {"tokens": 0.0, "sequences": 0.0}
    floor = 1.0 / cap

    def per_tok(a: float, t: float) -> dict[str, float]:
        d = t - a
        dc = _clamp(d)
        r = math.exp(dc)
        pt, pa = math.exp(t), math.exp(a)
        m = math.log((pt + pa) / 2)
        jt, ja = _clamp(m - t), _clamp(m - a)
        return {
            "k1_kl": a - t,
            "k2_kl": d * d / 2,
            "k3_kl": r - 1 - dc,
            "reverse_k3_kl": math.exp(-dc) - 1 + dc,
            "ratio_mean": r,
            "ratio_abs_dev": abs(r - 1),
            "abs_logp_diff_mean": abs(d),
            "mult_prob_error": math.exp(abs(dc)),
            "prob_diff_mean": abs(pt - pa),
            "js_div": 0.5 * (math.exp(jt) - 1 - jt) + 0.5 * (math.exp(ja) - 1 - ja),
        }

    rows = [per_tok(a, t) for a, t, _ in tokens]
    out: dict[str, Any] = {}
    for name in rows[0]:
        out[name] = sum(row[name] for row in rows) / n
        means = []
        k = 0
        for seq in seqs:
            means.append(sum(rows[k + j][name] for j in range(len(seq))) / len(seq))
            k += len(seq)
        out[name + "_seq"] = sum(means) / len(means)
    out["ratio_dev_1e4"] = (out["ratio_mean"] - 1) * 1e4
    out["ratio_dev_1e4_seq"] = (out["ratio_mean_seq"] - 1) * 1e4
    k3s = [row["k3_kl"] for row in rows]
    ratios = [row["ratio_mean"] for row in rows]
    absd = [row["abs_logp_diff_mean"] for row in rows]
    out["k3_kl_max"] = max(k3s)
    out["k3_kl_p99"] = float(np.percentile(np.array(k3s), 99))
    out["ratio_std"] = float(np.std(ratios))
    out["ratio_min"], out["ratio_max"] = min(ratios), max(ratios)
    out["abs_logp_diff_max"] = max(absd)
    out["abs_logp_diff_std"] = float(np.std(absd))
    out["prob_diff_max"] = max(row["prob_diff_mean"] for row in rows)
    pts = [math.exp(t) for _, t, _ in tokens]
    prs = [math.exp(a) for a, _, _ in tokens]
    out["prob_pearson"] = float(np.corrcoef(pts, prs)[0, 1])
    out["chi2_token"] = sum(r * r for r in ratios) / n - 1

    sums = [sum(t - a for a, t, _ in seq) for seq in seqs]
    rseq = [math.exp(_clamp(s)) for s in sums]
    s_count = len(seqs)
    out["chi2_seq"] = sum(math.exp(2 * _clamp(s)) for s in sums) / s_count - 1
    mlt = [sum(t for _, t, _ in seq) / len(seq) for seq in seqs]
    mlr = [sum(a for a, _, _ in seq) / len(seq) for seq in seqs]
    out["ppl_trainer"] = sum(math.exp(-x) for x in mlt) / s_count
    out["ppl_rollout"] = sum(math.exp(-x) for x in mlr) / s_count
    diffs = [a - b for a, b in zip(mlr, mlt, strict=True)]
    out["log_ppl_diff"] = sum(diffs) / s_count
    out["log_ppl_abs_diff"] = sum(abs(x) for x in diffs) / s_count
    out["ppl_ratio"] = sum(math.exp(_clamp(x)) for x in diffs) / s_count
    out["rollout_clip_rate"] = sum(1 for r in ratios if r < 1 - clip_low or r > 1 + clip_high) / n
    out["tis_token_rate"] = sum(1 for r in ratios if r > cap) / n
    out["mis_token_rate_low"] = sum(1 for r in ratios if r < floor) / n
    out["mis_token_rate_high"] = out["tis_token_rate"]
    out["mis_token_rate"] = sum(1 for r in ratios if r < floor or r > cap) / n
    out["tis_seq_rate"] = sum(1 for r in rseq if r > seq_cap) / s_count
    out["mis_seq_rate"] = sum(1 for r in rseq if r < floor or r > cap) / s_count
    geos = [math.exp(_clamp(s / len(seq))) for s, seq in zip(sums, seqs, strict=True)]
    out["geo_mis_seq_rate"] = sum(1 for g in geos if g < geo[0] or g > geo[1]) / s_count
    out["veto_token_rate"] = sum(1 for r in ratios if r < 1e-4) / n
    k = 0
    vetoed = 0
    for seq in seqs:
        if any(ratios[k + j] < 1e-4 or ratios[k + j] > 100 for j in range(len(seq))):
            vetoed += 1
        k += len(seq)
    out["veto_seq_rate"] = vetoed / s_count
    out["ess_token"] = sum(ratios) ** 2 / (n * sum(r * r for r in ratios))
    clamped = [min(max(r, floor), cap) for r in ratios]
    out["ess_token_clamped"] = sum(clamped) ** 2 / (n * sum(r * r for r in clamped))
    out["ess_seq"] = sum(rseq) ** 2 / (s_count * sum(r * r for r in rseq))
    out["seq_ratio_mean"] = sum(rseq) / s_count
    out["seq_ratio_max"] = max(rseq)
    out["seq_log_ratio_abs_max"] = max(abs(s) for s in sums)
    out["tokens"] = float(n)
    out["sequences"] = float(s_count)
    out["nonfinite_tokens"] = 0.0

    flat_new = None if new is None else np.asarray(new, dtype=np.float64).reshape(-1)
    if flat_new is not None:
        rhos, rows_adv = [], []
        flat_lt = lt.reshape(-1)
        for _, _, pos in tokens:
            dn = _clamp(flat_new[pos] - flat_lt[pos])
            rhos.append((math.exp(dn), dn))
            if adv is not None:
                a = np.asarray(adv, dtype=np.float64)
                rows_adv.append(a.reshape(-1)[pos] if a.ndim == 2 else a[pos // lr.shape[1]])
        out["kl_new_old"] = sum(rho - 1 - dn for rho, dn in rhos) / n
        out["clip_rate"] = (
            sum(1 for rho, _ in rhos if rho < 1 - clip_low or rho > 1 + clip_high) / n
        )
        if adv is not None:
            out["clip_rate_low"] = (
                sum(
                    1
                    for (rho, _), a in zip(rhos, rows_adv, strict=True)
                    if rho < 1 - clip_low and a < 0
                )
                / n
            )
            out["clip_rate_high"] = (
                sum(
                    1
                    for (rho, _), a in zip(rhos, rows_adv, strict=True)
                    if rho > 1 + clip_high and a > 0
                )
                / n
            )
    if ent is not None:
        flat_ent = np.asarray(ent, dtype=np.float64).reshape(-1)
        out["entropy"] = sum(flat_ent[pos] for _, _, pos in tokens) / n
        out["kl_entropy_ratio"] = out["k3_kl"] / out["entropy"]

    table = {
        name: [0.0] * (len(edges) - 1)
        for name in ("tokens", "sum_d", "sum_abs_d", "sum_k3", "sum_reverse_k3", "oob")
    }
    for (a, t, _), row in zip(tokens, rows, strict=True):
        p = math.exp(a)
        b = 0
        while b < len(edges) - 2 and p >= edges[b + 1]:
            b += 1
        table["tokens"][b] += 1
        table["sum_d"][b] += t - a
        table["sum_abs_d"][b] += abs(t - a)
        table["sum_k3"][b] += row["k3_kl"]
        table["sum_reverse_k3"][b] += row["reverse_k3_kl"]
        table["oob"][b] += 1 if row["ratio_mean"] < floor or row["ratio_mean"] > cap else 0
    out["buckets"] = table
    return out
