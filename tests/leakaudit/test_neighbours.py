"""The canary worlds of each neighbouring relation, decided in one place."""

import pytest

import accounting as A
from leakaudit.defenses import Defense
from leakaudit.fl.canary import worlds
from leakaudit.neighbours import OUT_WORLDS, canary_out, distance


def test_every_relation_of_the_accountant_has_its_out_world():
    assert set(OUT_WORLDS) == set(A.RELATIONS)


def test_the_out_world_and_distance_of_each_relation():
    assert [canary_out(r) for r in ("add-remove", "zero-out", "replace-one")] == \
        ["absent", "zero", "replaced"]
    assert [distance(r) for r in ("add-remove", "zero-out", "replace-one")] == [1.0, 1.0, 2.0]
    with pytest.raises(ValueError, match="relation"):
        canary_out("swap")


@pytest.mark.parametrize("level, relation, out", [
    ("client", "add-remove", "out"), ("client", "zero-out", "zero"),
    ("client", "replace-one", "zero"), ("instance", "add-remove", "zero")])
def test_the_simulator_game_plays_the_relations_out_world(level, relation, out):
    d = type("D", (Defense,), {"level": level, "relation": relation})()
    assert worlds(d) == (out, "in")
