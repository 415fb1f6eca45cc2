"""The simulator's second model, `boe-sim-judge`: a judge that looks for itself.

The generator `boe-sim-vlm` judging its own pool (the same model at T = 0,
with the same fixed per-image bias) tends to confirm what most of its samples
say: its consistent misreadings of an image are the pool's. The paper's
judge is a different, larger model (a 235B judge over a 30B generator), and
this model plays that part. It reads the same pixel beliefs (the same trained
heads, so what is hard to see stays somewhat hard for both) but

* its fixed per-image errors are its own: the bias and the rare confident
  misreadings are drawn from a seed salted with its name, independent of the
  generator's;
* it is sharper, most of all on small structures: a finding counts as fully
  visible at 2% of the view (the generator: 5%) and a small one is overlooked
  half as much; its slot heads are weighed twice as strongly against its bias.

**Error rates, from the paper's channel table** (`tab:full_reliability`):
whole-response kappa 0.61-0.72 and factor-judge kappa 0.50-0.61 over five
medical VQA sets, i.e. a useful whole-answer judge that is far from an oracle,
and claim judges only a little better than chance. The knobs below were set
once so that, on the simulator's questions with the generator at T = 1.1,
its answer verdicts land in that range (`benchmarks/sim_evidence.py` prints
the fitted kappa per calibration group: answer and whole-response groups
0.6-0.75, factor groups above 0.5) and then left alone; they were not tuned
to make any selection policy win. It still makes confident per-image errors
(about 8% per slot and image) and misses small findings on the whole image.
"""

from __future__ import annotations

from boe.sim.model import SimModel
from boe.sim.percept import NoiseConfig

__all__ = ["JUDGE_MODEL_NAME", "JUDGE_NOISE", "make_judge"]

JUDGE_MODEL_NAME = "boe-sim-judge"

#: The judge's perception (compare the generator's `NoiseConfig()` defaults in the comments).
JUDGE_NOISE = NoiseConfig(
    modality=0.5,  # 0.25: slot heads weigh twice as much against the bias
    region=0.5,  # 0.25
    plane=0.5,  # 0.25
    lesion=2.5,  # 2.0
    finding=3.5,  # 2.5
    size=3.0,  # 2.0
    side=8.0,  # 6.0
    visible_area=0.02,  # 0.05: small findings are seen in full
    notice_power=0.75,  # 1.5: and overlooked half as much
    bias=1.1,  # 1.2: its own per-image bias (independent seed), a little smaller
    confusion_rate=0.10,  # 0.12: its own rare confident misreadings
)

#: Seeds the judge's per-image bias apart from the generator's.
JUDGE_SALT = b"boe-sim-judge/1"


def make_judge(generator: SimModel | None = None) -> SimModel:
    """The judge model; it shares ``generator``'s perception cache (each view is perceived once)."""
    if generator is None:
        return SimModel(noise=JUDGE_NOISE, name=JUDGE_MODEL_NAME, salt=JUDGE_SALT)
    return SimModel(
        noise=JUDGE_NOISE,
        name=JUDGE_MODEL_NAME,
        salt=JUDGE_SALT,
        cache_size=generator.cache_size,
        _cache=generator._cache,
        _lock=generator._lock,
        _inflight=generator._inflight,
    )
