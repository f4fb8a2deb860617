"""The informer's JSON parsing: a document too deep for ``json`` is parsed without recursion."""

from __future__ import annotations

import json
import time

import pytest

from multikueue.runtime.informer import loads, loads_deep

pytestmark = pytest.mark.unit


def deep_list(depth: int) -> str:
    """A list response with a normal item and one nested ``depth`` levels below its ``spec``."""
    hostile = '{"metadata":{"name":"deep","namespace":"a"},"spec":' + '{"a":' * depth + "1" + "}" * depth + "}"
    return '{"kind":"WidgetList","metadata":{"resourceVersion":"7"},"items":[{"metadata":{"name":"ok","namespace":"b"}},' + hostile + "]}"


@pytest.mark.parametrize(
    "text",
    [
        '{"a":[1,2.5,-3e2,1E+2,"x\\"y\\u00e9\\n",true,false,null,{},[]],"b":{"c":[[]]}}',
        "[]",
        '"s"',
        "12",
        "-0.5",
        ' { "k" : { "j" : [ 1 , 2 ] } } ',
        '{"dup":1,"dup":2}',
    ],
)
def test_same_result_as_json(text: str) -> None:
    assert loads_deep(text) == json.loads(text)
    assert type(loads_deep("12")) is int and type(loads_deep("1.0")) is float


@pytest.mark.parametrize("text", ['{"a":1', '{"a":1}}', "[1] x", "{1:2}", "", "[nope]"])
def test_malformed_input_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        loads_deep(text)


def test_a_list_with_one_object_too_deep_for_json_still_gives_every_item() -> None:
    text = deep_list(5000)
    with pytest.raises(RecursionError):
        json.loads(text)
    listed = loads(text.encode())
    assert [item["metadata"]["name"] for item in listed["items"]] == ["ok", "deep"]
    assert listed["metadata"]["resourceVersion"] == "7"
    depth, value = 0, listed["items"][1]["spec"]
    while isinstance(value, dict):
        depth, value = depth + 1, value["a"]
    assert (depth, value) == (5000, 1)


def test_the_fast_path_is_json_itself() -> None:
    text = json.dumps({"items": [{"metadata": {"name": f"n{i}"}, "spec": {"x": list(range(50))}} for i in range(3000)]})
    started = time.perf_counter()
    quick = loads(text)
    fast = time.perf_counter() - started
    started = time.perf_counter()
    careful = loads_deep(text)
    slow = time.perf_counter() - started
    assert quick == careful == json.loads(text)
    print(f"\n{len(text) / 1e6:.2f} MB: json.loads {fast * 1000:.0f} ms, loads_deep {slow * 1000:.0f} ms")
