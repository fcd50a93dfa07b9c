"""The one text-table helper every CLI table goes through."""

from qtquant.base.tables import clip_left, text_table


def test_names_left_numbers_right_and_a_rule():
    out = text_table([("conv", "1.5", "12"), ("a_long_name", "10.25", "3")], ("layer", "ms", "n"), rule=True)
    assert out.splitlines() == [
        "layer           ms   n",
        "----------------------",
        "conv           1.5  12",
        "a_long_name  10.25   3",
    ]


def test_explicit_alignment_and_no_trailing_blanks():
    lines = text_table([("a", "x", "1"), ("bb", "yyyy", "22")], align="llr").splitlines()
    assert lines == ["a   x      1", "bb  yyyy  22"]
    lines = text_table([("a", "x"), ("bbb", "")], align="ll").splitlines()
    assert lines == ["a    x", "bbb"]  # a short or empty last cell leaves no blanks behind
    assert all(ln == ln.rstrip() for ln in lines)


def test_long_cells_keep_their_end_and_the_rule_stays_terminal_wide():
    name = "/model.22/cv2.0/cv2.0.0/conv/Conv_output_0"
    out = text_table([(name, "1")], ("layer", "µs"), rule=True, max_width=20).splitlines()
    assert out[2].startswith("…" + name[-19:]) and len(out[2].split("  ")[0]) == 20
    assert clip_left("abc", 5) == "abc" and clip_left("abcdef", 4) == "…def"
    wide = text_table([("x" * 200, "1")], ("n", "v"), rule=True).splitlines()
    assert len(wide[1]) == 120


def test_cells_are_text_and_an_empty_table_is_empty():
    assert text_table([(1, 2.5)]) == "1  2.5"
    assert text_table([]) == ""


def test_fmt_num_is_the_one_figure_format():
    from qtquant.base.tables import fmt_num

    assert [fmt_num(x) for x in (-0.001, 1.005e1, None, float("nan"), float("inf"), "no signal")] == \
        ["0.00", "10.05", "n/a", "n/a", "inf", "no signal"]
    assert fmt_num(-0.0, signed=True) == "+0.00" and fmt_num(-1.5, 1, signed=True) == "-1.5"
    assert fmt_num(None, missing="-") == "-"
