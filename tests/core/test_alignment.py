"""Edit-distance alignment, retry collapsing and the multiset match modes."""

from __future__ import annotations

from app.core.score.alignment import align, group_retries


def steps(names: str, expected: str, match: str = "strict", errored: str = "") -> list[int | None]:
    n = names.split()
    err = [i in {int(x) for x in errored.split()} for i in range(len(n))]
    return align(n, err, expected.split(), match).step_of_call


def test_identical_sequences_pair_one_to_one() -> None:
    assert steps("A B C", "A B C") == [0, 1, 2]


def test_extra_call_is_an_insertion_not_a_shift() -> None:
    assert steps("A X B C", "A B C") == [0, None, 1, 2]


def test_missing_step_is_a_deletion() -> None:
    a = align(["A", "C"], [False, False], ["A", "B", "C"])
    assert a.step_of_call == [0, 2]
    assert a.call_of_step == [0, None, 1]


def test_ties_prefer_substitution_so_confusions_reach_the_matrix() -> None:
    # X instead of B: substitution (cost 1) rather than insert+delete (cost 2)
    assert steps("A X C", "A B C") == [0, 1, 2]
    # one call, two steps: the earlier pairing wins
    assert steps("X", "A B") == [0]


def test_retry_after_error_collapses_onto_the_same_step() -> None:
    assert steps("A B B C", "A B C", errored="1") == [0, 1, 1, 2]
    # without the error the second B is an extra call
    assert steps("A B B C", "A B C") == [0, 1, None, 2]
    assert group_retries(["A", "B", "B", "B"], [False, True, True, False]) == [0, 1, 1, 1]


def test_unordered_matches_as_a_multiset_and_pairs_leftovers() -> None:
    assert steps("C A B", "A B C", "unordered") == [2, 0, 1]
    assert steps("C X", "A C", "unordered") == [1, 0]


def test_subset_allows_extra_calls_without_pairing_them() -> None:
    assert steps("R1 A R2 B", "A B", "subset") == [None, 0, None, 1]
    assert steps("R1", "A", "subset") == [None]


def test_superset_pairs_leftovers_like_unordered() -> None:
    assert steps("B X", "A B C", "superset") == [1, 0]


def test_multiset_modes_pair_calls_with_the_step_their_arguments_fit() -> None:
    args = [{"n": "B"}, {"n": "A"}]
    want = [{"n": "A"}, {"n": "B"}]

    def fits(i: int, j: int) -> bool:
        return args[i] == want[j]

    for mode in ("unordered", "subset", "superset"):
        assert align(["P", "P"], [False, False], ["P", "P"], mode, fits).step_of_call == [1, 0]
    # a wrong first try does not steal the step from the right later call (subset)
    args = [{"n": "wrong"}, {"n": "A"}]
    assert align(["P", "P"], [False, False], ["P"], "subset", lambda i, j: args[i] == {"n": "A"}).step_of_call == [
        None,
        0,
    ]
