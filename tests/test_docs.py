"""Generated documentation stays in sync with the declarations it is generated from."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_methods_doc_is_generated_from_the_declarations():
    from mixdp_core.cli.listing import methods_markdown

    text = (ROOT / "docs" / "methods.md").read_text(encoding="utf-8")
    assert text == methods_markdown() + "\n", "docs/methods.md is stale: run `python scripts/gen_methods_doc.py`"


def test_methods_doc_lists_every_method_and_field():
    from mixdp_core.config import describe
    from mixdp_core.methods import METHODS

    text = (ROOT / "docs" / "methods.md").read_text(encoding="utf-8")
    for name, cls in METHODS.items():
        section = text.split(f"## `{name}`", 1)[1].split("\n## ", 1)[0]
        for spec in describe(cls.config_cls):
            assert f"| `{spec.name}` |" in section, (name, spec.name)
    assert "**Costs privacy:**" in text.split("## `adamix`", 1)[1].split("\n## ", 1)[0]


def test_cli_params_help_is_generated_from_the_declarations(capsys):
    from mixdp_core.cli import main
    from mixdp_core.config import describe
    from mixdp_core.methods import METHODS

    assert main(["methods", "--params", "dppl_mean"]) == 0
    out = capsys.readouterr().out
    for spec in describe(METHODS.get("dppl_mean").config_cls):
        assert f"  {spec.name} (" in out
    assert "k_pool (int, default 1)" in out and "[an integer >= 1]" in out
    assert main(["methods", "--params", "adamix"]) == 0
    assert "optimistic_tuning (bool, default False)" in (o := capsys.readouterr().out) and "COSTS PRIVACY" in o
    assert main(["methods", "--params", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown method 'nope'" in err and "dppl_mean" in err
