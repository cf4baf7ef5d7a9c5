TEXT = "The cat and the hat. The END, isn't it? 42 cats"


def test_word_count(textstats):
    assert textstats.word_count(TEXT) == 11


def test_word_count_empty(textstats):
    assert textstats.word_count("  ...  ") == 0


def test_top_words(textstats):
    assert [tuple(x) for x in textstats.top_words(TEXT, 2)] == [("the", 3), ("42", 1)]


def test_top_words_ties_alphabetical(textstats):
    got = [tuple(x) for x in textstats.top_words("b a c b a", 3)]
    assert got == [("a", 2), ("b", 2), ("c", 1)]


def test_longest_line(textstats, tmp_path):
    p = tmp_path / "t.txt"
    p.write_text("ab\nabcd\nwxyz\nc\n")
    p.chmod(0o644)
    assert textstats.longest_line(str(p)) == "abcd"
