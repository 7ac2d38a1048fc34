from memroute.text.possessive import possessed
from memroute.text.tokenize import unigrams


def test_the_thing_is_the_first_word_after_my_that_is_not_skipped():
    skip = frozenset(unigrams("old new", stem=True))
    assert possessed("Where does my old roommate live?", skip) == {"roommat"}
    assert possessed("Where does my old roommate live?") == {"old"}
    assert possessed("When is my sister's birthday?", skip) == {"sister"}
    assert possessed("Our cat and my new bike.", skip) == {"cat", "bike"}
    assert possessed("What is the code?", skip) == frozenset()
