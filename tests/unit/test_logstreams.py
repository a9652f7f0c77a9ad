"""The log agent's stream layout, shared by `squall logs` and the local runtime's real pods."""

from squall.core.logstreams import ContainerStream, log_group, parse_stream, stream_prefix


def test_a_stream_name_round_trips() -> None:
    stream = ContainerStream(
        "ip-10-0-1-2.ec2.internal", "exp-1-chief-0-x7k2p", "research", "trainer", "0a1b2c"
    )
    assert stream.name == (
        "ip-10-0-1-2.ec2.internal-application.var.log.containers.exp-1-chief-0-x7k2p_research_trainer-0a1b2c.log"
    )
    assert parse_stream(stream.name) == stream
    assert stream.name.startswith(stream_prefix(stream.host, stream.pod, stream.namespace))


def test_streams_of_other_layouts_are_not_read_as_containers() -> None:
    assert parse_stream("kubelet.service") is None
    assert parse_stream("host-application.var.log.containers.pod_ns_c-NOTHEX.log") is None


def test_the_log_group_is_per_cluster() -> None:
    assert log_group("squall") == "/aws/containerinsights/squall/application"
