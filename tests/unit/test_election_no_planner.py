"""``segcoord run --no-planner``: the worker's election is no candidacy (no broker, no consumer here).

What a user would notice when this fails: a worker started with ``--no-planner`` is elected and plans after
all (the planner's thread takes CPU from its timeline agent), or its HTTP API claims to lead instead of
redirecting to the worker that plans.
"""

from __future__ import annotations

import pytest

from events.topics import Topics
from streaming.cli import main
from streaming.service.election import Claim, Election, ElectionLeadership


class _Directory:
    """The election topic's latest claim, as :class:`~streaming.service.election.LeaderDirectory` answers it."""

    def __init__(self, claim: Claim | None) -> None:
        self.claim = claim

    def current(self, max_age_s: float | None = None) -> Claim | None:
        return self.claim


def _bystander(elected: list[int]) -> Election:
    # an address nothing listens on: a candidate would build a consumer for it, a non-candidate never connects
    return Election("127.0.0.1:1", Topics("t."), "w3", client_id="segcoord-w3", on_elected=elected.append,
                    on_deposed=lambda: elected.append(-1), http="http://w3:8081", candidate=False)


def test_a_worker_that_does_not_stand_never_leads_and_names_the_leader(capsys: pytest.CaptureFixture[str]) -> None:
    elected: list[int] = []
    election = _bystander(elected).start()
    assert "does not stand (--no-planner)" in capsys.readouterr().out
    assert not election.leading and election.epoch is None
    # its HTTP API redirects to the worker whose claim is the latest
    leader = Claim("w1", 7, "http://w1:8081")
    leadership = ElectionLeadership(election, _Directory(leader), ready=lambda: False)  # type: ignore[arg-type]
    assert not leadership.leads()
    assert leadership.leader() == leader
    # closing it deposes nothing and calls nothing back: it never led
    election.close()
    assert elected == [] and not election.leading


@pytest.mark.parametrize(("flag", "says"), [("--no-planner", "never stands for the planner election"),
                                            ("--planner-only", "only stands for the planner election")])
def test_run_help_offers_the_split_flags(flag: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["run", "--help"])
    assert info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert flag in out and says in out


def test_run_refuses_no_planner_with_the_spark_balancer_before_any_broker(capsys: pytest.CaptureFixture[str]) -> None:
    # the Spark balancer is started beside the planner: beside a worker that never plans it would balance alone
    assert main(["run", "--no-planner", "--balancer", "spark", "--bootstrap", "127.0.0.1:1"]) == 2
    assert "--no-planner with --balancer spark" in capsys.readouterr().err


def test_run_refuses_no_planner_with_planner_only_before_any_broker(capsys: pytest.CaptureFixture[str]) -> None:
    # a process that neither plans nor runs the agents would do nothing
    assert main(["run", "--no-planner", "--planner-only", "--bootstrap", "127.0.0.1:1"]) == 2
    assert "--no-planner with --planner-only" in capsys.readouterr().err
