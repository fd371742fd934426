"""lab.cli.options: the shared argument types and options of every command group (counts >= 1, one store option
with hidden aliases), checked through the real parser."""
from __future__ import annotations

import pytest
from conftest import ORDQA

from lab.cli.main import build_parser, main


def test_argparse_errors_are_one_line_exit_2(capsys):
    for argv in (["run", "--dataset", ORDQA, "--strategy", "bm25", "--k", "abc"], ["sweep", "x.yaml", "--jobs", "0"],
                 ["testset", "generate", "--dataset", ORDQA, "--out", "o", "--n", "0"],
                 ["answers", "--dataset", ORDQA, "--max-queries", "0"], ["report", "--worst", "0"],
                 ["robustness", "--dataset", ORDQA, "-k", "0"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        err = capsys.readouterr().err
        assert exc.value.code == 2 and err.count("\n") == 1 and "expected an integer >= 1" in err, (argv, err)


def test_gate_thresholds_name_the_flag_and_the_range(capsys):
    """A gate threshold out of [0, 1] is refused under the flag's name (it was refused under GateConfig's field
    name, max_overlap, which no user types)."""
    for flag, value in (("--max-overlap", "2"), ("--min-answer-support", "-0.1"), ("--min-similarity", "x"),
                        ("--duplicate-threshold", "1.5")):
        with pytest.raises(SystemExit) as exc:
            main(["testset", "generate", "--dataset", ORDQA, "--out", "o", flag, value])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and err.count("\n") == 1, err
        assert f"argument {flag}: expected a number in [0, 1]" in err, err
    assert build_parser().parse_args(["testset", "generate", "--dataset", "d", "--out", "o",
                                      "--max-overlap", "1"]).max_overlap == 1.0


def test_one_store_option_on_every_command_with_hidden_aliases(capsys):
    """--tracking-root everywhere a command touches MLflow; --root and --mlflow-root still parse, unlisted."""
    parser = build_parser()
    for argv in (["run", "--dataset", "d", "--strategy", "bm25"], ["sweep", "s.yaml"], ["compare"], ["ui"],
                 ["report"], ["demo"], ["testset", "generate", "--dataset", "d", "--out", "o"],
                 ["answers", "--dataset", "d", "--strategy", "bm25"], ["robustness", "--dataset", "d"],
                 ["train-embedder", "--dataset", "d"], ["train-reranker", "--dataset", "d"]):
        assert parser.parse_args(argv + ["--tracking-root", "T"]).tracking_root == "T", argv
        assert parser.parse_args(argv + ["--root", "R"]).tracking_root == "R", argv
        assert parser.parse_args(argv + ["--mlflow-root", "M"]).tracking_root == "M", argv
        assert parser.parse_args(argv).tracking_root == "mlruns", argv
        with pytest.raises(SystemExit):
            main([*argv[:1], "--help"] if argv[0] != "testset" else ["testset", "generate", "--help"])
        out = capsys.readouterr().out
        assert "--tracking-root" in out and "--mlflow-root" not in out and "--root " not in out, argv
