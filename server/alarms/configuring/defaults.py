"""The default rule pack, enabled for every new project (editable through the API and CLI).

| rule | kind (space) | on | fires when |
|---|---|---|---|
| vllm-kl spike | spike (log) | vllm-kl signal (trainer) | log k3 more than 5 robust σ above its trailing 100-step median for 2 steps in a row, and 2e-5 above the median |
| vllm-kl rise | sustained (log) | vllm-kl signal (trainer) | the median of the last 7 steps more than 2.5 robust σ above the median of the 100 before, and 2e-5 above it |
| vllm-kl high | threshold | vllm-kl signal, runs not labelled `mismatch.moe` | above 0.02 for 5 consecutive steps, from the first step: no history needed |
| ratio drift | threshold | \\|ratio signal\\| | above 50 (×1e-4) for 3 steps, from the first step — raw vs processed logprobs, a sampler-only penalty; a truncated weight mean (verl, ms-swift, AReaL) below 1 counts a third, so 150 there |
| vllm-kl high (sampler-only setting) | threshold | vllm-kl signal, runs labelled `mismatch.sampler_only` | above 1e-3 for 3 steps |
| ratio drift (sampler-only setting) | threshold | \\|ratio signal\\|, runs labelled `mismatch.sampler_only` | above 14 (×1e-4) for 3 steps |
| mult prob error | threshold | mult_prob_error | above 1.1 for 5 steps |
| entropy collapse | spike (linear, relative) | entropy | below 50% of its trailing median for 5 steps |
| lag growing | sustained (linear) | lag | short EWMA over 2× the long one, lag above 2 |
| non-finite | nonfinite | canonical metrics | NaN or ±Inf |
| stalled | stalled | any step | no new step for 300 s while the run was live |
| collapse precursor | precursor (log) | vllm-kl signal then grad_norm/entropy | 2 steps of a vllm-kl spike followed within 30 steps by a grad_norm or entropy spike (critical) |
| vllm-kl far beyond | threshold | vllm-kl signal, runs not labelled `mismatch.moe` | above 0.2 (ten times vllm-kl high's 0.02) for 8 consecutive steps (critical) |
| ratio drift far beyond | threshold | \\|ratio signal\\| | above 500 (×1e-4, ten times ratio drift's 50) for 8 steps (critical) |

**Severity follows magnitude and duration.** The warning rules say a run left healthy ground;
the two "far beyond" rules (the pack `severity`, so projects made before it receive it once)
say it is far off that ground and has stayed there: their alert joins the run's open incident as
a follow-up that raises it to critical, which is an escalation its receivers are told of.

**Every trainer's signal.** The vllm-kl rules read the family `signals.VLLM_KL` and ratio drift
reads `signals.RATIO`: each series through the strongest member it logs — k3 where a trainer
logs it (our collectors, verl, NeMo-RL), k1 (OpenRLHF, ms-swift), mean |d| and the importance
ratio (TRL), their sequence-level forms (slime) — converted to one scale, so one set of numbers
below holds for all of them (`server/domain/signals.py` derives each conversion). An alert names
the signal it read and gives value and threshold in that signal's units.

**How the numbers were chosen.** They are tuned on the seeded corpus of
`benchmarks/alarm_quality.py` (healthy runs with log-normal k3 noise of σ 0.3–0.8 in log space,
slow ×3 drifts, blips, restarts, NaN bursts; runs whose k3 rises ×20–×200 over 10–40 steps before
grad_norm explodes), against its targets — at most 0.5 warning and no critical false alarms per
10,000 healthy steps, every collapse detected, median lead ≥ 10 steps, every run mismatched from
its first step alerted by its 10th — in every framework's rendering, and checked on corpus seeds
nobody tuned on (`docs/alarms.md` lists the figures). The reasons, rule by rule, are in each
rule's `WHY`; a changed number should come with a new benchmark run.

**Runs whose config names the cause.** A repetition, presence or frequency penalty, a top-k,
top-p or min-p, or a temperature beside raw logprobs is applied by the rollout's sampler and not
by the trainer (`server/domain/sampler.py`): such a run is mismatched from its first step, and the
server labels it `mismatch.sampler_only` from its recorded config. The second pack,
`SAMPLER_PACK`, watches those runs at levels no healthy run needs to be spared from, because
none of them is healthy: what is left to tell is whether the setting moves the signal.

**MoE runs have MoE levels.** A run whose config records a mixture-of-experts model is labelled
`mismatch.moe` (`server/domain/moe.py`); its healthy vllm-kl is a hundred times a dense run's,
so the two absolute vllm-kl ceilings above leave it (`!mismatch.moe`) and the MoE pack
(`server/alarms/configuring/moe_pack.py`) watches it at its own levels. The relative rules watch it as any run.

An alert whose series stops reporting for the rule's `no_data_s` (900 s unless a rule says
otherwise) ends as "no data" rather than firing forever: three times the stalled rule's 300 s, so
a run that stops says "stalled" first and its open alerts follow.
"""

from __future__ import annotations

from typing import Any

from server.alarms import ids
from server.alarms.configuring import correction_pack, moe_pack
from server.alarms.store import AlarmStore
from server.domain import signals
from server.domain.alarms import Rule
from server.domain.metrics import NONFINITE_WATCHED
from server.domain.sampler import SAMPLER_ONLY_LABEL
from server.domain.scopes import ALL_PROJECTS
from server.storage.alarms import packs

K3_FLOOR = 2e-5
"""Below this, a rise of k3 is not worth a page: it keeps a flat near-zero series (identical
logprobs, k3 ≈ 0 ± rounding) from firing on noise, yet sits well under a ×20 rise from the lowest
healthy level the field reports for dense models (1e-5, so a collapse reaches ≥ 2e-4)."""

SPIKE_WHY = """Log space: k3's noise is multiplicative (a healthy run wanders by ×2–5), so a
z-score of log k3 has one width at every level, where a linear one fired 66 times per 10k healthy
steps. z = 5 over a 100-step window: with Gaussian noise in log space a single step passes it about
once per 3.5 million steps, and 100 values estimate the MAD to about ±10%. Two steps in a row:
isolated one-step blips (×3–×8) are benign and common; a collapse stays up."""

RISE_WHY = """The early warning. A median of 7 steps is not carried by isolated blips (at most
3 of them fit in 7 steps when they are 3 or more apart) and has about half the noise of one value
(1.25 σ/√7), so 2.5 robust σ — some 5 standard errors of that median — is rarely crossed by
chance, while a slow rise crosses it long before any single value would pass the spike rule's 5 σ:
on the corpus it alone detects every collapse, with a median lead above 20 steps. The 100 steps
before the short window are the baseline; it freezes while the rule breaches."""

HIGH_WHY = """An absolute level that needs no history, so a run mismatched from its first step (a
sampler-only penalty, a quantized rollout engine, raw logprobs) is caught by its fifth step, where
the relative rules, which compare a run with its own past, never fire. 0.02 is twice the highest
healthy k3 of the corpus and of dense bf16 runs in the field (1e-2), inside the range where field
runs failed (A100 at 1e-2 … 1). Five steps in a row, not one: a run parked at 1e-2 with the
corpus's widest noise (σ 0.8 in log space) passes 0.02 on 19% of its steps and five in a row
about three times per 10,000 steps (at 0.025: 12%, three per 100,000), while a run that sits
above it from step 1 passes it on most steps. Healthy runs spread over 1e-5 … 1e-2 raised it as
often at 0.02 as at 0.025 over the 3.4 M healthy steps of the 12 tuning seeds (once, in every
rendering that reads a KL), but at 0.025 raw-logprobs runs that log only a KL (k3 or k1: NeMo-RL's, prime-rl's,
OpenRLHF's, RLinf's names), which read 0.02–0.03 there, went unheard by their 10th step on three
of the six seed pairs. A TRL run at a mean |d| of 0.25 nats reads 0.25 here."""

RATIO_WHY = """A steady offset of the mean importance ratio from 1 is what raw instead of processed
logprobs, a sampler-only penalty, or a top-p/top-k the trainer ignores look like, from the first
step. A healthy token mean of r stays within a few ×1e-4 of 1 (its sampling error over 1e4+
tokens; the corpus's healthy 99.9th percentile is 42); 50 ×1e-4 held for 3 steps is far outside
that. Token-truncated weight means (verl's, ms-swift's, AReaL's min(r, 2)) also read the healthy
gap below 1, where the cap cuts its top: over the 3.4 M healthy steps of the 12 tuning seeds their
99.9th percentile is 21 above 1 but 144 below, the single worst step 830, and read as a plain mean
they paged 1.6–1.8 times per 10k healthy steps on seeds 404–405. Below 1 their deviation is read
divided by 3 (`signals.CAPPED_SHORTFALL`), so 50 stands at 150 there: past the healthy tail,
short of the 193 and more that raw-logprobs runs read below 1 (124 and more above); on the
tuning seeds it then fired once on them (AReaL, 402–403), on three fresh pairs never. A longer
hold would not do: 5 steps instead of 3 leaves TRL's raw-logprobs runs near 0.3 unheard by their
10th step. TRL's per-sequence ratio is scaled down by `signals.SEQ_RATIO_NOISE` first, which
puts 50 at a mean of 0.3: a healthy run with long completions reads down to 0.35 (see there)."""

SAMPLER_HIGH_WHY = """On a run whose config records a sampler-only setting, the question is no
longer whether the run is mismatched but whether the setting shows: 1e-3 is the top of the k3
that healthy dense bf16 runs log (1e-5 … 1e-3), and a sampler-only repetition penalty of 1.1 on
this CPU's tiny model reads a mean |d| of 0.028 (3e-3 on the k3 scale), below the 0.02 that
spares nearly every healthy run but three times this. Three steps, so one noisy step does not decide."""

SAMPLER_RATIO_WHY = """14 ×1e-4 puts TRL's per-sequence ratio at 0.8 (a fifth of the rollout's
weight gone from TRL's correction): the real TRL GRPO runs on this CPU read 0.92–1.06 without a
penalty and 0.31–1.02 at a repetition penalty of 1.1, below 0.8 from their third step. Token-level
ratio means (ours, verl, ms-swift) leave 14 ×1e-4 only at a healthy k3 near 1e-2; on a run with a
sampler-only setting that is no false alarm to spare."""

MPE_WHY = """NeMo calls 1.05 worth a look, but a healthy run at k3 ≈ 1e-2 whose mismatch sits on
10% of the tokens hovers at 1.03–1.06 and its noise crossed 1.05 for 3 steps ten times per 10k
healthy steps. 1.1 for 5 steps is twice that excess, held."""

PRECURSOR_WHY = """Critical: it must never fire on a healthy run. Both its detectors work in log
space (grad_norm's noise is multiplicative too); the k3 trigger needs two breaching steps in a
row like the spike rule, since a benign blip followed by an ordinary grad_norm or entropy wiggle
was its one false alarm on the corpus."""

FAR_K3_WHY = """Critical: the run is burning compute, not drifting. 0.2 is ten times the ceiling
vllm-kl high warns at (0.02) and twenty times the highest k3 a healthy run of the corpus or the
field logs (1e-2); a healthy run there with the corpus's widest noise (σ 0.8 in log space) passes
0.2 on one step in 10,000, and 8 in a row never in the corpus nor by the arithmetic (1e-32).
Eight steps, because a collapse's last steps also pass 0.2 and the precursor already speaks for
those: what this rule adds is a run that sits there from its first steps, like the public TRL
run with a repetition penalty (mean |logp diff| 0.26, so 0.27 on the k3 scale; its importance
ratio at 0.03), which it makes critical at its 8th logged step."""

FAR_RATIO_WHY = """Critical: a token-level mean importance ratio 5% away from 1 (500 ×1e-4, ten
times ratio drift's 50) means one policy's probabilities are off by that much on average: raw
logprobs or a sampler-only setting at a strength no run learns through. A healthy token mean
stays within a few ×1e-4 of 1, with heavy tails: over the 12 tuning seeds of the corpus its worst
single step reads 1,100 (ours), 280 for the truncated weight means (read below 1 divided by 3, as
ratio drift says), but no 8 steps in a row pass 40 in any rendering. TRL's per-sequence ratio is
scaled down first (`signals.SEQ_RATIO_NOISE`) and cannot reach 500, so its runs escalate through
vllm-kl far beyond instead."""

PACK: list[dict[str, Any]] = [
    {
        "name": "vllm-kl spike",
        "kind": "spike",
        "metric": signals.VLLM_KL,
        "source": "trainer",
        "severity": "warning",
        "params": {
            "space": "log",
            "window": 100,
            "z": 5.0,
            "floor": K3_FLOOR,
            "min_history": 30,
            "for_steps": 2,
        },
    },
    {
        "name": "vllm-kl rise",
        "kind": "sustained",
        "metric": signals.VLLM_KL,
        "source": "trainer",
        "severity": "warning",
        "params": {
            "space": "log",
            "short": 7,
            "long": 100,
            "warmup": 30,
            "z": 2.5,
            "floor": K3_FLOOR,
            "for_steps": 1,
        },
    },
    {
        "name": "vllm-kl high",
        "kind": "threshold",
        "metric": signals.VLLM_KL,
        "label": moe_pack.NOT_MOE,  # MoE runs: their own ceiling (`moe_pack`)
        "severity": "warning",
        "params": {"threshold": 0.02, "direction": "above", "for_steps": 5},
    },
    {
        "name": "ratio drift",
        "kind": "threshold",
        "metric": signals.RATIO,
        "severity": "warning",
        "params": {"threshold": 50.0, "abs": True, "direction": "above", "for_steps": 3},
    },
    {
        "name": "mult prob error",
        "kind": "threshold",
        "metric": "mult_prob_error",
        "severity": "warning",
        "params": {"threshold": 1.1, "direction": "above", "for_steps": 5},
    },
    {
        "name": "entropy collapse",
        "kind": "spike",
        "metric": "entropy",
        "severity": "warning",
        "params": {
            "space": "linear",  # a fraction of the median: the same test in either space
            "relative_below": 0.5,
            "window": 50,
            "min_history": 10,
            "for_steps": 5,
        },
    },
    {
        "name": "lag growing",
        "kind": "sustained",
        "metric": "lag",
        "severity": "info",
        "params": {
            "space": "linear",  # small counts, often 0: no log
            "short": 5,
            "long": 50,
            "ratio": 2.0,
            "floor": 2.0,  # lag 1 with an occasional 2 is ordinary one-step-off-policy training
            "warmup": 10,
            "for_steps": 3,
        },
    },
    {
        "name": "non-finite values",
        "kind": "nonfinite",
        "metric": "*",
        "severity": "critical",
        "params": {"metrics": list(NONFINITE_WATCHED), "for_steps": 1},
    },
    {
        "name": "stalled run",
        "kind": "stalled",
        "metric": "*",
        "severity": "warning",
        "params": {"seconds": 300},
    },
    {
        "name": "collapse precursor",
        "kind": "precursor",
        "metric": signals.VLLM_KL,
        "source": "trainer",
        "severity": "critical",
        "params": {
            "space": "log",
            "trigger_metric": signals.VLLM_KL,
            "trigger_for": 2,
            "follow": ["grad_norm", "entropy"],
            "within_steps": 30,
            "window": 100,
            "z": 5.0,
            "floor": K3_FLOOR,
            "min_history": 30,
        },
    },
]

SAMPLER_PACK: list[dict[str, Any]] = [
    {
        "name": "vllm-kl high (sampler-only setting)",
        "kind": "threshold",
        "metric": signals.VLLM_KL,
        "label": SAMPLER_ONLY_LABEL,
        "severity": "warning",
        "params": {"threshold": 1e-3, "direction": "above", "for_steps": 3},
    },
    {
        "name": "ratio drift (sampler-only setting)",
        "kind": "threshold",
        "metric": signals.RATIO,
        "label": SAMPLER_ONLY_LABEL,
        "severity": "warning",
        "params": {"threshold": 14.0, "abs": True, "direction": "above", "for_steps": 3},
    },
]
"""Rules for runs labelled with a sampler-only setting: a pack of its own, so projects that
received the default pack before it existed receive this one once too."""

SEVERITY_PACK: list[dict[str, Any]] = [
    {
        "name": "vllm-kl far beyond",
        "kind": "threshold",
        "metric": signals.VLLM_KL,
        "label": moe_pack.NOT_MOE,
        "severity": "critical",
        "params": {"threshold": 0.2, "direction": "above", "for_steps": 8},
    },
    {
        "name": "ratio drift far beyond",
        "kind": "threshold",
        "metric": signals.RATIO,
        "severity": "critical",
        "params": {"threshold": 500.0, "abs": True, "direction": "above", "for_steps": 8},
    },
]
"""Critical levels far beyond the warning ceilings, held: an incident's severity follows how bad
it is. A pack of its own, so projects made before it receive it once too."""

WHY: dict[str, str] = {
    "vllm-kl spike": SPIKE_WHY,
    "vllm-kl rise": RISE_WHY,
    "vllm-kl high": HIGH_WHY,
    "ratio drift": RATIO_WHY,
    "mult prob error": MPE_WHY,
    "collapse precursor": PRECURSOR_WHY,
    "vllm-kl high (sampler-only setting)": SAMPLER_HIGH_WHY,
    "ratio drift (sampler-only setting)": SAMPLER_RATIO_WHY,
    "vllm-kl far beyond": FAR_K3_WHY,
    "ratio drift far beyond": FAR_RATIO_WHY,
}
"""Why a tuned rule has the numbers it has, by rule name (the others keep their first values,
which the corpus found quiet: entropy collapse, non-finite, stalled)."""
WHY.update(correction_pack.WHY)
WHY.update(moe_pack.WHY)


PACK_NAME = "default"
"""The name a project's receipt of the default pack is recorded under (`project_packs`)."""

PACKS: dict[str, list[dict[str, Any]]] = {
    PACK_NAME: PACK,
    "sampler-only": SAMPLER_PACK,
    "severity": SEVERITY_PACK,
    # how corrections fare, and exact-parity runs: server/alarms/configuring/correction_pack.py
    **correction_pack.PACKS,
    # the vllm-kl ceilings at MoE levels: server/alarms/configuring/moe_pack.py
    "moe": moe_pack.MOE_PACK,
}
"""Every pack a project receives, by receipt name, in the order given."""

DEFAULT_RULES: list[dict[str, Any]] = [spec for specs in PACKS.values() for spec in specs]
"""What a new project starts with: every pack's rules."""


def seed_defaults(store: AlarmStore, project: str) -> list[Rule]:
    """Give a project each pack once, however the project was made (live ingest, an import, a
    token or a rule made through the API); returns what it made — nothing for a pack the
    project received before, even if its team deleted every rule since."""
    if project == ALL_PROJECTS:
        return []
    made: list[Rule] = []
    for name, specs in PACKS.items():
        pack = [Rule(id=ids.rule(), project=project, **spec) for spec in specs]
        made.extend(packs.receive(store.db, project, name, pack))
    return made


def seed_pending(store: AlarmStore) -> list[Rule]:
    """The packs for every project the database knows that never received them (projects made
    by an import before imports gave them, by a version that did not record receipts, or
    before a pack existed)."""
    pending = sorted({project for name in PACKS for project in packs.pending(store.db, name)})
    return [rule for project in pending for rule in seed_defaults(store, project)]
