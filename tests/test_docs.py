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


def test_c_failure_map_agrees_with_the_tables_marks():
    """scripts/c_failure_map.py re-derives (c) from the committed JSONs; its verdicts must be
    the ✓ / ✗ that regimes.md's property tables print for (c) (same rule, same means), and the
    map must cover every regime those tables mark for (c)."""
    import importlib.util
    import re

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("c_failure_map", root / "scripts" / "c_failure_map.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mapped = {r["regime"]: r["holds"] for r in mod.rows(count_rows=False)}
    marks: dict[str, set[bool]] = {}
    for line in (root / "docs" / "results" / "regimes.md").read_text().splitlines():
        # the property tables (regime, role, (a)-(d)); other tables of regimes.md name regimes too
        m = re.match(r"\| `([a-z0-9_]+)` \| (?:development|validation)[^|]* \|([^|]+)\|([^|]+)\|([^|]+)\|([^|]+)\|$",
                     line)
        if m and m.group(4).strip()[:1] in "✓✗":
            marks.setdefault(m.group(1), set()).add(m.group(4).strip().startswith("✓"))
    assert len(mapped) >= 30
    assert set(mapped) == set(marks)
    for name, holds in mapped.items():
        assert marks[name] == {holds}, name


def test_regimes_scoreboard_is_current():
    """regimes.md's scoreboard is scripts/regimes_scoreboard.py's output on the sections below it
    (regenerating a section without rewriting the scoreboard fails here), and it counts every
    regime of those sections once: the summary's 10 and the drawn sections' 8 + 24 + 12."""
    import importlib.util

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("regimes_scoreboard", root / "scripts" / "regimes_scoreboard.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    text = mod.DOC.read_text()
    board = text[text.index(mod.BEGIN) + len(mod.BEGIN):text.index(mod.END)].strip()
    assert board == mod.scoreboard(text)
    assert [len(s["rows"]) for s in mod.sections(text)] == [10, 8, 24, 12]
    # a failure the section prints is listed, with its slack
    assert "✗ `scarce_50_d256_ir10` -" in board  # a failure the summary prints, with its slack
    # the rule on a made-up section: one ✓, one ✗, one n/a
    fake = "\n".join([f"<!-- BEGIN AUTO {n} -->\nGenerated (git commit `abc1234`).\n"
                      "| `r1` | development | ✓ +1.0 ± 0.0 | ✓ +2.0 ± 0.1 | ✗ -3.0 ± 1.0 | n/a |\n"
                      "| `r2` | validation | ✓ +1.0 ± 0.0 | ✓ +2.0 ± 0.1 | n/a | n/a |\n"
                      f"<!-- END AUTO {n} -->" for n in mod.SECTIONS])
    row = mod.scoreboard(fake).splitlines()[2]
    assert row.startswith(f"| {mod.SECTIONS[0]} (`abc1234`) | 2 | 2 / 2 | 2 / 2 | 0 / 1 — ✗ `r1` -3.0 ± 1.0 | 0 / 0 |")
    # a later section that regenerated r1: its row replaces the older one, and the row says so
    newer = (f"\n<!-- BEGIN AUTO {mod.REGENERATED} -->\nGenerated (git commit `def5678`).\n"
             "| `r1` | development | ✓ +1.0 ± 0.0 | ✓ +2.0 ± 0.1 | ✓ +4.0 ± 1.0 | ✓ +0.5 ± 0.2 |\n"
             f"<!-- END AUTO {mod.REGENERATED} -->")
    row = mod.scoreboard(fake + newer).splitlines()[2]
    assert row.startswith(f"| {mod.SECTIONS[0]} (`abc1234`; its 1 imbalanced at `def5678`) | 2 | 2 / 2 | 2 / 2 | "
                          "1 / 1 | 1 / 1 |")
