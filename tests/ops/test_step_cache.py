"""``ops.step_cache.StepValue``: a value derived from a step's index tensors is kept while they are the same
objects (or views of the same base) at the same version, derived again on any change, never kept from a
graph capture, and kept per thread."""

from __future__ import annotations

import threading

import torch

from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.step_cache import StepValue


class Derive:
    def __init__(self):
        self.calls = 0

    def __call__(self, t):
        def make():
            self.calls += 1
            return t.sum().item() + 1000 * self.calls
        return make


def test_kept_for_the_same_tensor_and_for_views_of_its_base():
    cache, derive = StepValue("t"), Derive()
    t = torch.arange(6, dtype=torch.int32)
    first = cache.get((t,), (), derive(t))
    assert cache.get((t,), (), derive(t)) == first and derive.calls == 1
    view = t.view(2, 3)
    assert cache.get((view,), (), derive(view)) != first   # another shape: not the same value
    again = t.view(2, 3)                                      # a new view object of the same base
    kept = cache.get((again,), (), derive(again))
    assert cache.get((t.view(2, 3),), (), derive(t)) == kept and derive.calls == 2


def test_any_change_derives_again():
    cache, derive = StepValue("t"), Derive()
    t = torch.arange(4)
    cache.get((t,), (), derive(t))
    t.add_(1)                                   # in place: the version moves
    cache.get((t,), (), derive(t))
    assert derive.calls == 2
    u = t.clone()                               # equal values, another object
    cache.get((u,), (), derive(u))
    assert derive.calls == 3
    cache.get((u,), ("other extra",), derive(u))
    assert derive.calls == 4
    cache.forget()
    cache.get((u,), ("other extra",), derive(u))
    assert derive.calls == 5


def test_a_dead_tensors_address_is_not_a_match():
    cache, derive = StepValue("t"), Derive()
    for _ in range(5):   # the allocator may hand each new tensor the freed one's address
        t = torch.arange(8, dtype=torch.int32)
        cache.get((t,), (), derive(t))
        del t
    assert derive.calls == 5


def test_never_kept_from_a_capture():
    cache, derive = StepValue("t"), Derive()
    t = torch.arange(3)
    with seam.capture_region():
        cache.get((t,), (), derive(t))
        cache.get((t,), (), derive(t))
    assert derive.calls == 2                    # derived in every layer of the capture
    cache.get((t,), (), derive(t))
    assert derive.calls == 3                    # nothing from the capture was kept
    with seam.capture_region():
        cache.get((t,), (), derive(t))
    assert derive.calls == 4                    # a value kept eagerly does not serve a capture


def test_kept_per_thread():
    cache, derive = StepValue("t"), Derive()
    t = torch.arange(3)
    cache.get((t,), (), derive(t))
    other = threading.Thread(target=lambda: cache.get((t,), (), derive(t)))
    other.start()
    other.join()
    assert derive.calls == 2
    cache.get((t,), (), derive(t))
    assert derive.calls == 2


def test_the_very_object_at_its_version_is_kept_without_reading_its_storage(monkeypatch):
    from sglang_ascend_hybrid.ops import step_cache

    cache, derive = StepValue("t"), Derive()
    t, view = torch.arange(6), torch.arange(6)[1:]
    cache.get((t, view), (), derive(t))
    read = []
    real = step_cache.tensor_identity
    monkeypatch.setattr(step_cache, "tensor_identity", lambda x: read.append(x) or real(x))
    kept = cache.get((t, view), (), derive(t))
    assert derive.calls == 1 and read == []          # the same objects, not written: nothing re-read
    again = view.view(5)                             # another view object of the same base: compared whole
    assert cache.get((t, again), (), derive(t)) == kept and len(read) == 1 and read[0] is again
    view.add_(1)                                     # written through the view: its base's version moves
    cache.get((t, view), (), derive(t))
    assert derive.calls == 2


def test_a_capture_in_another_thread_is_not_this_threads():
    inside, seen = threading.Event(), []
    leave = threading.Event()

    def capture():
        with seam.capture_region():
            seen.append(seam.capturing())
            inside.set()
            leave.wait(10)

    other = threading.Thread(target=capture)
    other.start()
    inside.wait(10)
    try:
        assert seen == [True] and not seam.capturing()
        with seam.capture_region():
            with seam.capture_region():
                assert seam.capturing()
            assert seam.capturing()                  # the outer region is still open
        assert not seam.capturing()
    finally:
        leave.set()
        other.join()
    assert not seam.capturing() and seam._regions_open == 0
