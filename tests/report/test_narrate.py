"""The evidence log in words: movements, the reversal below kappa 0.5, checks that cannot change the choice."""

from __future__ import annotations

from boe.core.graph import GroupIndex, Question
from boe.report.narrate import narrate


def _question() -> Question:
    answers = ["ct", "ct", "ct", "mr", "mr"]
    rec = {
        "format": "boe-ledger/1",
        "question_id": "q",
        "dataset": "d",
        "candidates": [{"index": i, "answer": a, "valid": True} for i, a in enumerate(answers)],
        "claims": [{"id": "modality=ct"}, {"id": "region=chest"}],
        "edges": [
            *({"candidate": i, "claim": "modality=ct", "sign": 1 if a == "ct" else -1} for i, a in enumerate(answers)),
            *({"candidate": i, "claim": "region=chest", "sign": 1} for i in range(5)),
        ],
        "actions": [
            {
                "id": "v:modality=ct",
                "kind": "vlm_factor",
                "claim": "modality=ct",
                "candidate": None,
                "cost": 4,
                "group": "vlm/answer:modality",
                "outcome": "confirm",
            },
            {
                "id": "v:region=chest",
                "kind": "vlm_factor",
                "claim": "region=chest",
                "candidate": None,
                "cost": 4,
                "group": "vlm/region",
                "outcome": "confirm",
            },
            {
                "id": "w:3",
                "kind": "whole_response",
                "claim": None,
                "candidate": 3,
                "cost": 8,
                "group": "whole",
                "outcome": "confirm",
            },
        ],
    }
    return Question.from_dict(rec, GroupIndex())


def test_a_confirmation_below_kappa_half_lowers_the_claim_and_can_flip_the_choice():
    q = _question()
    n = narrate(q, [(0, 1, 0.2)], 0.55)
    assert "wrong more often than right (κ 0.200 < 0.5) lowers" in n.steps[0]
    assert "mr×2 rise, ct×3 fall" in n.steps[0] and "The choice changes: ct → mr" in n.steps[0]
    assert n.closing.startswith("The evidence overturned the raw majority ct (3 of 5 candidates) in favour of mr")


def test_a_claim_every_candidate_shares_is_marked_as_unable_to_change_the_choice():
    q = _question()
    n = narrate(q, [(1, 1, 0.8), (0, 1, 0.8)], 0.55)
    assert "Every candidate moved together" in n.steps[0] and "[could not change the choice" in n.steps[0]
    assert n.inert == [True, False]  # a rejection of modality=ct would have handed the choice to mr
    assert "right more often than wrong" in n.steps[1] and "ct×3 rise, mr×2 fall" in n.steps[1]
    assert n.closing == "The evidence kept the raw majority answer ct (1 of 2 checks could not change the choice)."


def test_unresolved_and_coin_flip_channels_move_nothing():
    q = _question()
    n = narrate(q, [(2, 0, 0.9), (2, 1, 0.5)], 0.55)
    assert "moves no score" in n.steps[0] and "no better than a coin" in n.steps[1]
    assert narrate(q, [], 0.55).closing == "No evidence was bought: the choice is the raw majority, ct."


def test_a_posterior_policy_is_narrated_by_its_probabilities():
    q = _question()
    post = [[0.6, 0.6, 0.6, 0.3, 0.3], [0.35, 0.35, 0.35, 0.55, 0.55]]  # the whole-response check confirmed mr
    n = narrate(q, [(2, 1, 0.64)], 0.55, posteriors=post)
    assert n.steps == ["The check confirmed candidate #3's whole answer (mr): P(ct 0.60 → 0.35, mr 0.30 → 0.55). "
                       "The choice changes: ct → mr."]  # fmt: skip
    assert n.closing == "The evidence moved the choice from ct (3 of 5 candidates) to mr (2 of 5)."
    assert "κ" not in " ".join(n.steps)


def test_no_check_could_change_this_answer_replaces_a_list_of_useless_purchases():
    q = _question()
    n = narrate(q, [], 0.55, settled=3)
    assert n.closing.startswith("No check could change this answer (ct) under any outcome of the affordable checks")
    later = narrate(q, [(0, 1, 0.8)], 0.55, settled=2)
    assert later.closing.endswith("Then no affordable check could change the answer (2 proposed check(s) not bought).")
    same = narrate(q, [], 0.55, posteriors=[[0.5] * 5], settled=-1)
    assert same.closing.startswith("No check could change this answer")
