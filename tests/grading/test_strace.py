"""The strace reader (legorl.grading.strace): split and killed calls, and one connect rule for the
monitor and the rollout checks (``::1`` is loopback everywhere)."""

from __future__ import annotations

import pytest

from legorl.grading.strace import (
    Connect,
    activity_from_trace,
    connects_from_trace,
    foreign_connects,
    parse_connects,
    parse_strace,
)

INET = '{pid} connect(3<socket:[{n}]>, {{sa_family=AF_INET, sin_port=htons({port}), sin_addr=inet_addr("{ip}")}}, 16) = {ret}\n'
INET6 = (
    "{pid} connect(3<socket:[{n}]>, {{sa_family=AF_INET6, sin6_port=htons({port}), sin6_flowinfo=htonl(0), "
    'inet_pton(AF_INET6, "{ip}", &sin6_addr), sin6_scope_id=0}}, 28) = {ret}\n'
)
UNIX = '{pid} connect(4<UNIX:[{n}]>, {{sa_family=AF_UNIX, sun_path="/run/legorl/gw.sock"}}, 110) = 0\n'
REFUSED = "-1 ECONNREFUSED (Connection refused)"


def _log() -> str:
    return "".join(
        [
            INET.format(pid=10, n=1, port=8000, ip="127.0.0.1", ret=0),
            INET6.format(pid=10, n=2, port=8000, ip="::1", ret=REFUSED),
            INET6.format(pid=10, n=3, port=8000, ip="::ffff:127.0.0.1", ret=0),
            INET6.format(pid=11, n=4, port=443, ip="2606:4700::1111", ret="-1 ENETUNREACH (Network is unreachable)"),
            INET.format(pid=11, n=5, port=53, ip="10.0.0.2", ret="-1 ENETUNREACH (Network is unreachable)"),
            INET6.format(pid=12, n=6, port=22, ip="::1", ret=REFUSED),
            UNIX.format(pid=12, n=7),
        ]
    )


def test_connects_are_read_with_family_address_and_port():
    got = parse_connects(_log())
    assert [str(c) for c in got] == [
        "AF_INET 127.0.0.1:8000",
        "AF_INET6 ::1:8000",
        "AF_INET6 ::ffff:127.0.0.1:8000",
        "AF_INET6 2606:4700::1111:443",
        "AF_INET 10.0.0.2:53",
        "AF_INET6 ::1:22",
        'AF_UNIX "/run/legorl/gw.sock"',
    ]
    assert [c.loopback for c in got] == [True, True, True, False, False, True, False]
    assert got[0].ok and not got[1].ok


def test_ipv6_loopback_is_the_gateway_too_and_other_ports_are_foreign():
    connects = connects_from_trace(_log())
    assert foreign_connects(connects, 8000) == [
        "AF_INET6 2606:4700::1111:443",
        "AF_INET 10.0.0.2:53",
        "AF_INET6 ::1:22",
    ]


def test_the_monitor_flags_only_non_loopback_connects():
    assert activity_from_trace(_log()).connects == [(11, "2606:4700::1111:443"), (11, "10.0.0.2:53")]


def test_a_connect_split_by_another_thread_is_joined():
    log = (
        '20 connect(5<socket:[9]>, {sa_family=AF_INET, sin_port=htons(443), sin_addr=inet_addr("1.1.1.1")}, 16'
        " <unfinished ...>\n"
        '21 openat(AT_FDCWD</workspace>, "a.py", O_RDONLY) = 3</workspace/a.py>\n'
        "20 <... connect resumed>) = -1 ENETUNREACH (Network is unreachable)\n"
    )
    assert connects_from_trace(log) == ["AF_INET 1.1.1.1:443"]
    assert [e.syscall for e in parse_strace(log)] == ["openat", "connect"]


def test_a_connect_whose_process_was_killed_inside_it_still_counts():
    log = (
        '30 connect(5<socket:[9]>, {sa_family=AF_INET, sin_port=htons(80), sin_addr=inet_addr("93.184.216.34")}, 16'
        " <unfinished ...>\n30 +++ killed by SIGKILL +++\n"
    )
    assert activity_from_trace(log).connects == [(30, "93.184.216.34:80")]
    assert foreign_connects(connects_from_trace(log), 8000) == ["AF_INET 93.184.216.34:80"]


def test_an_unreadable_connect_is_foreign_never_dropped():
    log = "40 connect(3, 0x7ffd12345678, 16) = -1 EFAULT (Bad address)\n40 connect(3, {sa_family=AF_INET, sin_po"
    connects = connects_from_trace(log)
    assert len(connects) == 2 and all(c.startswith("UNPARSED 40 connect(") for c in connects), connects
    assert foreign_connects(connects, 8000) == connects


@pytest.mark.parametrize(
    "text,foreign",
    [
        ("AF_INET 127.0.0.1:8000", False),
        ("AF_INET6 ::1:8000", False),
        ("AF_INET6 ::ffff:127.0.0.1:8000", False),
        ("AF_INET 127.0.0.2:8000", False),
        ('AF_UNIX "/x.sock"', False),
        ("AF_INET 127.0.0.1:8001", True),
        ("AF_INET 10.0.0.1:8000", True),
        ("AF_NETLINK", True),
        ("UNPARSED 1 connect(", True),
    ],
)
def test_foreign_connects(text, foreign):
    assert foreign_connects([text], 8000) == ([text] if foreign else [])


def test_connect_text_form_round_trips_through_foreign_connects():
    c = Connect(1, "AF_INET6", host="::1", port="8000")
    assert str(c) == "AF_INET6 ::1:8000" and c.loopback and foreign_connects([str(c)], 8000) == []
