"""bench.faults_net's checks of a recorded history, on histories made up for the purpose: the run
itself needs root and a dozen namespaces (python -m bench.faults_net), but what it calls a problem
is decided here, and a check that never fires would let a lost post or a 500 pass as a clean run."""
from bench.faults_net import HOSTS, NET, Traffic, answering_host, check_batches, web_problems


def web(*, web1: dict, web2: dict, cut=("web1",)) -> dict:
    return {"hosts": {host: {"statuses": statuses, "cut_from_a_store": host in cut,
                             "share_503": statuses.get("503", 0) / sum(statuses.values())}
                      for host, statuses in (("web1", web1), ("web2", web2))}}


def test_a_500_is_a_problem_on_any_host_cut_or_not():
    problems = web_problems("s", web(web1={"200": 90, "500": 1}, web2={"200": 100}))
    assert problems == ["s: web1 answered {'500': 1}"]
    assert web_problems("s", web(web1={"200": 90}, web2={"200": 99, "502": 1})) == ["s: web2 answered {'502': 1}"]


def test_503s_count_against_hosts_that_could_reach_their_stores_only():
    assert web_problems("s", web(web1={"200": 50, "503": 50}, web2={"200": 99, "503": 1})) == []  # 1%: the target
    assert web_problems("s", web(web1={"200": 50, "503": 50}, web2={"200": 98, "503": 2})) == [
        "s: web2 reached its stores but answered 503 to 2.0%"]


def test_the_answering_host_is_the_last_upstream_nginx_tried():
    web1, web2 = (f"{NET}.{HOSTS[host]}:8000" for host in ("web1", "web2"))
    assert answering_host(web2) == "web2"
    assert answering_host(f"{web1}, {web2}") == "web2"
    assert answering_host("") == answering_host(None) == "nginx"


def test_summary_separates_the_fault_from_what_came_after_healing():
    traffic = Traffic("s")
    traffic.began, healed = 100.0, 110.0
    traffic.answers = [
        {"kind": "read", "host": "web1", "status": 200, "began": 101.0, "at": 101.1},
        {"kind": "read", "host": "web1", "status": 503, "began": 105.0, "at": 105.5},
        {"kind": "read", "host": "web1", "status": 200, "began": 106.0, "at": 110.5},  # held until healing
        {"kind": "read", "host": "web1", "status": 503, "began": 111.0, "at": 112.0},  # an error after healing
        {"kind": "read", "host": "web2", "status": 200, "began": 105.0, "at": 105.1},
    ]
    hosts = traffic.summary(["web1"], healed)["hosts"]
    assert hosts["web1"]["statuses"] == {"200": 2, "503": 2} and hosts["web1"]["share_503"] == 0.5
    assert hosts["web1"]["during_fault"] == {"requests": 3, "statuses": {"200": 2, "503": 1}, "answered_after_heal": 1}
    assert hosts["web1"]["last_error_after_heal_s"] == 2.0 and hosts["web1"]["cut_from_a_store"]
    assert hosts["web2"]["share_503"] == 0.0 and not hosts["web2"]["cut_from_a_store"]
    assert "nginx" not in hosts
    traffic.pool.shutdown()


def test_an_epoch_applied_by_two_consumers_or_out_of_order_is_a_problem():
    ok = [{"consumer": "c1", "shard": "a", "epoch": 1, "at": 1}, {"consumer": "c2", "shard": "a", "epoch": 2, "at": 2}]
    assert check_batches(ok) == []
    twice = ok + [{"consumer": "c1", "shard": "a", "epoch": 2, "at": 3}]
    assert check_batches(twice) == ["shard a epoch 2 applied by ['c1', 'c2']"]
    stale = ok + [{"consumer": "c1", "shard": "a", "epoch": 1, "at": 3}]
    assert check_batches(stale) == ["shard a: epochs out of order [1, 2, 1]"]
