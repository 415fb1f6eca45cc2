"""The simulator's second model, `boe-sim-judge`: a judge that looks for itself.

The generator `boe-sim-vlm` judging its own pool (the same model at T = 0,
with the same fixed per-image bias) tends to confirm what most of its samples
say: its consistent misreadings of an image are the pool's. The paper's
judge is a different, larger model (a 235B judge over a 30B generator), and
this model plays that part. It reads the same pixel beliefs (the same trained
heads, so what is hard to see stays somewhat hard for both) but

* its fixed per-image errors are its own: the bias and the rare confident
  misreadings (same sizes as the generator's: logit bias std 1.2, a fixed
  misreading in 12% of image-slot pairs) are drawn from a seed salted with its
  name, independent of the generator's;
* it is sharper on small structures: a finding counts as fully visible at 2%
  of the view (the generator: 5%), a small one is overlooked half as much,
  and which lesion a blob is reads a little more sharply. Everything else
  (modality, region, plane, sides, sizes) it reads as the generator does.

**Error rates, from the paper's channel table** (`tab:full_reliability`):
whole-response kappa 0.61-0.72 and factor-judge kappa 0.50-0.61 over five
medical VQA sets: a useful whole-answer judge that is far from an oracle, and
claim judges a little better than chance. The three knobs above were chosen
so that its answer verdicts land near that range on the simulator's questions
(generator at T = 1.1, K = 16), checked once and then left alone; they were
not tuned to make any selection policy win (a sharper variant, with its slot
heads weighed twice as strongly, gave whole-response kappa 0.83 and was
dropped as outside the paper's range). `benchmarks/sim_evidence.py` prints the
fitted kappa of every calibration group for this judge and for the generator
judging itself.
"""

from __future__ import annotations

from boe.sim.model import SimModel
from boe.sim.percept import NoiseConfig

__all__ = ["JUDGE_MODEL_NAME", "JUDGE_NOISE", "make_judge"]

JUDGE_MODEL_NAME = "boe-sim-judge"

#: The judge's perception: the generator's `NoiseConfig()` except where it is sharper on small structures.
JUDGE_NOISE = NoiseConfig(
    finding=3.0,  # 2.5: which lesion a blob is, read a little more sharply
    visible_area=0.02,  # 0.05: a finding is seen in full at 2% of the view
    notice_power=0.75,  # 1.5: and a small one is overlooked half as much
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
