"""`cairn bench`'s own arguments: every suite listed in its help, `--provider` passed on to the bench."""

from __future__ import annotations

import os

import pytest

from cairn import bench, cli


def test_cairn_bench_help_lists_every_suite(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bench", "--help"]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    for name in bench.SUITES:
        assert f" {name}," in shown or f" {name})" in shown, name


def test_cairn_bench_takes_provider_and_hands_it_to_the_bench(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # set, then removed: monkeypatch then restores the variable's state before the test, whatever
    # the bench writes into os.environ (else the quality suite's tests would run on "openai")
    monkeypatch.setenv("CAIRN_BENCH_PROVIDER", "scripted")
    monkeypatch.delenv("CAIRN_BENCH_PROVIDER")
    # an unknown suite stops the bench's own parser before any suite runs, after --provider was read
    with pytest.raises(SystemExit) as stopped:  # the bench's own parser
        cli.main(["bench", "--only", "no-such-suite", "--provider", "openai"])
    assert stopped.value.code == 2
    assert "unknown suite(s): no-such-suite" in capsys.readouterr().err

    assert os.environ.get("CAIRN_BENCH_PROVIDER") == "openai"


def test_cairn_bench_refuses_an_unknown_provider(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bench", "--provider", "nope"]) == 2
    assert "invalid choice: 'nope'" in capsys.readouterr().err
