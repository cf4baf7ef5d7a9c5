def word_count(text: str) -> int:
    """Number of words: maximal runs of letters, digits or apostrophes."""
    raise NotImplementedError


def top_words(text: str, n: int) -> list[tuple[str, int]]:
    """The n most frequent words, lower-cased, as (word, count), most frequent first;
    ties broken alphabetically."""
    raise NotImplementedError


def longest_line(path: str) -> str:
    """The longest line of the text file at path, without its newline (the first one on a tie)."""
    raise NotImplementedError
