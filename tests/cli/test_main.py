"""lab.cli.main: errors raised by any command become one `error:` line and exit 2."""
from __future__ import annotations

from conftest import ORDQA

from lab.cli.main import main


def test_unknown_split_is_one_line_on_every_command(tmp_path, capsys):
    """Dataset.split raises UnknownSplitError (a ConfigError and a KeyError): no KeyError traceback anywhere."""
    for argv in (["run", "--dataset", ORDQA, "--strategy", "bm25", "--split", "nosuch"],
                 ["testset", "export-annotation", "--dataset", ORDQA, "--out", str(tmp_path / "p.csv"), "--split",
                  "nosuch"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
        assert "no qrels for split 'nosuch'; available: ['test'] (--split)" in err, err
