from urlkit.url import URL, join_url, split_url


def test_split_url():
    url = split_url("HTTPS://Example.com:8080/a%20b/c?x=1&y=2#top")
    assert url == URL("https", "example.com", 8080, "/a b/c", {"x": ["1"], "y": ["2"]}, "top")


def test_split_minimal():
    assert split_url("http://h") == URL("http", "h", None, "/", {}, "")


def test_join_url():
    url = URL("https", "example.com", None, "/a b", {"q": ["x"]}, "sec")
    assert join_url(url) == "https://example.com/a%20b?q=x#sec"
