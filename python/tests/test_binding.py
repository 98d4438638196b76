"""The shadowsync Python package against a real shadowsync-ps on 127.0.0.1:
trainers, zero-copy groups (numpy and torch), tables in every mode,
errors with the library's message, the torch.nn.Module helper. Expected
values are worked out by hand. Run by ctest (python_binding) with
SHADOWSYNC_LIBRARY and SHADOWSYNC_PS_BIN set; `python3 -m unittest` works
the same by hand."""
import os
import re
import subprocess
import tempfile
import time
import unittest

import numpy as np

import shadowsync
import shadowsync.pytorch  # noqa: F401 (needs torch; the helper under test)

PS_BIN = os.environ.get("SHADOWSYNC_PS_BIN", "build/bin/shadowsync-ps")


class PS:
    """A shadowsync-ps on 127.0.0.1, port picked by the kernel."""

    def __init__(self, *extra):
        self.extra = list(extra)

    def __enter__(self):
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log")
        self.proc = subprocess.Popen([PS_BIN, "--listen", "127.0.0.1:0", "--http", "",
                                      "--insecure-loopback"] + self.extra,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 10
        while time.time() < deadline:
            self.log.seek(0)
            m = re.search(r"listening on (\S+?),?\s", self.log.read())
            if m:
                self.address = m.group(1).rstrip(",")
                return self
            time.sleep(0.05)
        self.proc.kill()
        raise RuntimeError("shadowsync-ps did not start")

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        self.log.close()


class BindingTest(unittest.TestCase):
    def setUp(self):
        # The tests set everything they use: no SHADOWSYNC_* from outside.
        for k in [k for k in os.environ if k.startswith("SHADOWSYNC_")
                  and k not in ("SHADOWSYNC_LIBRARY", "SHADOWSYNC_PS_BIN", "SHADOWSYNC_LOG_LEVEL")]:
            del os.environ[k]

    def test_version(self):
        self.assertRegex(shadowsync.version(), r"^\d+\.\d+\.\d+$")
        self.assertEqual(shadowsync.__version__, shadowsync.version())

    def test_errors_carry_the_library_message(self):
        with self.assertRaises(shadowsync.ShadowSyncError) as e:
            shadowsync.Trainer(sync="shadow")  # no PS
        self.assertEqual(e.exception.name, "invalid_argument")
        self.assertIn("ps: no parameter servers", str(e.exception))
        with self.assertRaises(shadowsync.ShadowSyncError) as e:
            shadowsync.Trainer(ps="127.0.0.1:1", alpha=1.5)
        self.assertIn("alpha must be in (0, 1]", e.exception.message)
        with self.assertRaises(shadowsync.ShadowSyncError) as e:
            shadowsync.Trainer(sync="sometimes")
        self.assertIn('sync="sometimes"', e.exception.message)
        with self.assertRaises(shadowsync.ShadowSyncError) as e:
            shadowsync.Trainer(sync="none", alpah=0.3)
        self.assertEqual(e.exception.name, "not_found")
        os.environ["SHADOWSYNC_ALPHA"] = "lots"
        with self.assertRaises(shadowsync.ShadowSyncError) as e:
            shadowsync.Trainer(sync="none")
        self.assertIn('SHADOWSYNC_ALPHA="lots"', e.exception.message)
        del os.environ["SHADOWSYNC_ALPHA"]
        with shadowsync.Trainer(sync="none") as t:
            t.add_dense("w", 4)
            with self.assertRaises(shadowsync.ShadowSyncError) as e:
                t.add_dense("w", 4)
            self.assertIn("group w", e.exception.message)
            with self.assertRaises(shadowsync.ShadowSyncError):
                t.add_dense("a b", 4)
        with self.assertRaises(shadowsync.ShadowSyncError):
            t.step()  # closed

    def test_group_is_zero_copy(self):
        with shadowsync.Trainer(sync="none") as t:
            g = t.add_dense("w", init=np.arange(6, dtype=np.float32))
            a = g.numpy()
            self.assertEqual(a.dtype, np.float32)
            np.testing.assert_array_equal(a, [0, 1, 2, 3, 4, 5])
            a[2] = 42.0
            self.assertEqual(g.numpy()[2], 42.0)  # the same memory
            import torch
            x = g.torch()
            x[3] = -1.0
            self.assertEqual(a[3], -1.0)
            self.assertEqual(a.ctypes.data, x.data_ptr())
            for _ in range(5):
                t.step()
            self.assertEqual(g.stats()["iterations"], 5)

    def test_device_groups_say_why_without_a_gpu(self):
        with shadowsync.Trainer(sync="none") as t:
            g = t.add_dense("w", init=np.arange(3, dtype=np.float32))
            self.assertIsNone(g.device)
            np.testing.assert_array_equal(g.read(), [0, 1, 2])  # a copy
            self.assertFalse(hasattr(g, "__cuda_array_interface__"))
            if shadowsync.device_count() > 0:
                self.skipTest("this machine has a CUDA device")
            self.assertIn("no CUDA device", shadowsync.device_count_why())
            with self.assertRaises(shadowsync.ShadowSyncError) as e:
                t.add_dense("d", 4, device=0)
            self.assertEqual(e.exception.name, "unsupported")
            self.assertIn("group d on device 0: no CUDA device", e.exception.message)

    def test_device_group_is_a_cuda_tensor(self):
        # A device group through PyTorch, zero-copy, synced by hand-worked
        # foreground S-EASGD rounds (alpha 0.5) with a host trainer:
        # a's replica 1 + 1 (a torch add on the GPU) = 2 sets the centre;
        # b (3): d = 0.5 (3 - 2) = 0.5, b 2.5, centre 2.5; a: d = 0.5 (2 -
        # 2.5) = -0.25, a 2.25 (applied by the shadow pool's kernel).
        if shadowsync.device_count() == 0:
            self.skipTest(f"no CUDA device: {shadowsync.device_count_why()}")
        import torch

        if not torch.cuda.is_available():
            self.skipTest("this PyTorch has no CUDA")
        with PS() as ps:
            a = shadowsync.Trainer(ps=ps.address, sync="foreground", sync_every=1,
                                   final_rounds=0, trainer_name="a")
            b = shadowsync.Trainer(ps=ps.address, sync="foreground", sync_every=1,
                                   final_rounds=0, trainer_name="b")
            ga = a.add_dense("w", init=np.full(1000, 1.0, np.float32), device=0)
            gb = b.add_dense("w", init=np.full(1000, 3.0, np.float32))
            self.assertEqual(ga.device, 0)
            x = ga.torch()
            self.assertTrue(x.is_cuda)
            self.assertEqual(x.data_ptr(), ga.__cuda_array_interface__["data"][0])
            x += 1.0
            torch.cuda.synchronize()
            np.testing.assert_array_equal(ga.read(), np.full(1000, 2.0))
            a.step()
            b.step()
            np.testing.assert_array_equal(gb.numpy(), np.full(1000, 2.5))
            a.step()
            np.testing.assert_array_equal(ga.read(), np.full(1000, 2.25))
            self.assertTrue(torch.equal(x.cpu(), torch.full((1000,), 2.25)))
            with self.assertRaises(shadowsync.ShadowSyncError):
                ga.numpy()
            a.close()
            b.close()

    def test_foreground_easgd_by_hand(self):
        # Two trainers, K = 1, alpha 0.5. A's round sets the centre to its
        # replica (1); B's round: d = 0.5 (3 - 1) = 1, so B is 2, centre 2.
        with PS() as ps:
            a = shadowsync.Trainer(ps=ps.address, sync="foreground", sync_every=1,
                                   final_rounds=0, trainer_name="a")
            b = shadowsync.Trainer(ps=ps.address, sync="foreground", sync_every=1,
                                   final_rounds=0, trainer_name="b")
            ga = a.add_dense("w", init=np.full(8, 1.0, np.float32))
            gb = b.add_dense("w", init=np.full(8, 3.0, np.float32))
            a.step()
            np.testing.assert_array_equal(ga.numpy(), np.full(8, 1.0))
            b.step()
            np.testing.assert_array_equal(gb.numpy(), np.full(8, 2.0))
            self.assertEqual(gb.stats()["rounds"], 1)
            self.assertIn('shadowsync_sync_rounds_total{trainer="b",group="w",algo="easgd"} 1',
                          b.metrics())
            a.close()
            b.close()

    def test_background_sync_converges(self):
        # Background S-MA: two replicas held at 0 and 4 meet at the mean 2.
        with PS() as ps:
            ts = [shadowsync.Trainer(ps=ps.address, sync="shadow", algo="ma", min_round_gap=1,
                                     final_rounds=0, trainer_name=f"t{i}") for i in range(2)]
            gs = [t.add_dense("w", init=np.full(16, 4.0 * i, np.float32))
                  for i, t in enumerate(ts)]
            deadline = time.time() + 20
            while time.time() < deadline:
                for t in ts:
                    t.step()
                if all(np.allclose(g.numpy(), 2.0) for g in gs):
                    break
                time.sleep(0.01)
            for g in gs:
                np.testing.assert_allclose(g.numpy(), 2.0)
                self.assertGreater(g.stats()["rounds"], 0)
            for t in ts:
                t.close()

    def test_compressed_sync_by_hand(self):
        # int8 through the PS, K = 1: A's round is a reset (float32), which
        # makes the centre A's replica, 1. B's first round is a reset too:
        # d = 0.5 (3 - 1) = 1 arrives int8-encoded, and a block whose every
        # value is 1 (min = max) decodes exactly: B is 2.
        with PS() as ps:
            a = shadowsync.Trainer(ps=ps.address, sync="foreground", sync_every=1,
                                   final_rounds=0, trainer_name="a", encoding="int8")
            b = shadowsync.Trainer(ps=ps.address, sync="foreground", sync_every=1,
                                   final_rounds=0, trainer_name="b", encoding="int8")
            ga = a.add_dense("w", init=np.full(300, 1.0, np.float32))
            gb = b.add_dense("w", init=np.full(300, 3.0, np.float32))
            a.step()
            b.step()
            np.testing.assert_array_equal(gb.numpy(), np.full(300, 2.0))
            # Encoded rounds move a quarter of float32's bytes (two 256-blocks).
            m = b.metrics()
            sent = [l for l in m.splitlines()
                    if l.startswith('shadowsync_sync_sent_bytes_total{trainer="b"')]
            self.assertEqual(sent[0].split()[-1], str(300 + 2 * 8))
            a.close()
            b.close()
        with self.assertRaises(shadowsync.ShadowSyncError) as e:
            shadowsync.Trainer(ps="127.0.0.1:1", encoding="int4", env=False)
        self.assertIn("f32|fp16|bf16|int8", str(e.exception))

    def test_tables_in_every_mode(self):
        ids = np.array([7, 8, 7], np.uint64)
        with PS() as ps:
            with shadowsync.Trainer(ps=ps.address, sync="none") as t:
                for mode in ("local", "remote", "cached"):
                    tb = t.table(f"ads_{mode}", 4, mode=mode, lr=0.5)
                    tb.warm(ids)  # cached: rows 7 and 8 loaded ahead, in one call
                    before = tb.prefetch(ids).wait()  # fetched after the warm-up, in order
                    if mode == "cached":  # the warm-up's rows: hits
                        self.assertEqual(tb.stats()["cache_hits"], 2)
                    self.assertEqual(tb.stats()["remote_rows"], 0 if mode == "local" else 2)
                    self.assertEqual(before.shape, (3, 4))
                    np.testing.assert_array_equal(before[0], before[2])  # one row, id 7
                    # Repeated ids add up: id 7 gets 2 x 1, SGD lr 0.5 moves it by -1,
                    # id 8 by -0.5. A cached table's flush then syncs the rows with
                    # their shard (alpha 0.5, the shard still at the start): half
                    # of the move stays, x - 0.5 (x - c).
                    tb.push(ids, np.ones((3, 4), np.float32))
                    tb.flush()
                    after = tb.prefetch(ids).wait()
                    kept = 0.5 if mode == "cached" else 1.0
                    np.testing.assert_allclose(after[0], before[0] - 1.0 * kept, atol=1e-6)
                    np.testing.assert_allclose(after[1], before[1] - 0.5 * kept, atol=1e-6)
                    if mode == "remote":
                        remote_row8 = after[1]
                    self.assertEqual(tb.stats()["lookups"], 6)
                    with self.assertRaises(shadowsync.ShadowSyncError) as e:
                        tb.push(ids, np.full((3, 4), np.nan, np.float32))
                    self.assertIn("NaN or Inf", e.exception.message)
            # A standalone remote table sees what the trainer's pushed.
            alone = shadowsync.Table("ads_remote", 4, mode="remote", ps=ps.address, lr=0.5)
            np.testing.assert_allclose(alone.lookup([8])[0], remote_row8, atol=1e-6)
            alone.close()
        with self.assertRaises(shadowsync.ShadowSyncError) as e:
            shadowsync.Table("x", 4, mode="remote")
        self.assertIn("needs shards", e.exception.message)

    def test_module_survives_close(self):
        """After the trainer closes, the shared module owns copies of its last
        values: a forward pass gives what it gave before the close, even
        once the freed memory is used again."""
        import torch
        torch.manual_seed(3)
        model = torch.nn.Sequential(torch.nn.Linear(8, 256), torch.nn.ReLU(),
                                    torch.nn.Linear(256, 1))
        x = torch.randn(4, 8)
        with shadowsync.Trainer(sync="none") as t:
            shadowsync.pytorch.share_module(t, model, "m")
            with torch.no_grad():
                model[0].weight.add_(0.5)  # written through the group's memory
                before = model(x).clone()
        for k in range(8):  # reuse the freed memory
            with shadowsync.Trainer(sync="none") as t2:
                t2.add_dense("junk%d" % k, init=np.full(8 * 256 + 256 + 257, 1e6, np.float32))
        with torch.no_grad():
            self.assertTrue(torch.equal(model(x), before))

    def test_readme_example_runs_as_it_stands(self):
        import torch
        readme = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "README.md")
        with open(readme) as f:
            block = re.search(r"```python\n(.*?)```", f.read(), re.S).group(1)
        env = {}
        exec(compile(block, "python/README.md", "exec"), env)  # noqa: S102 (our own README)
        # The trainer is closed: the module owns its parameters again, and
        # a forward pass gives what it gave before the close.
        model, x = env["model"], env["x"]
        with torch.no_grad():
            out = model(x)
            before = out.clone()
            self.assertTrue(torch.isfinite(out).all())
            import gc
            gc.collect()
            self.assertTrue(torch.equal(model(x), before))

    def test_torch_module_shares_its_parameters(self):
        import torch
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.EmbeddingBag(10, 4), torch.nn.Linear(4, 3),
                                    torch.nn.ReLU(), torch.nn.Linear(3, 1))
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        with shadowsync.Trainer(sync="none") as t:
            g = shadowsync.pytorch.share_module(t, model, "mlp")
            self.assertEqual(g.size, 4 * 3 + 3 + 3 * 1 + 1)  # the embedding stays out
            for n, p in model.named_parameters():
                torch.testing.assert_close(p.detach(), before[n])
            flat = g.numpy()
            lin = model[1].weight
            self.assertEqual(lin.data_ptr(), flat.ctypes.data)  # the group's memory
            self.assertNotEqual(model[0].weight.data_ptr(), flat.ctypes.data)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            x = torch.tensor([[1, 2], [3, 4]])
            loss = model(x).sum()
            loss.backward()
            grad = model[3].bias.grad.clone()
            bias_at = 4 * 3 + 3 + 3  # offset of the last Linear's bias in the group
            old = float(flat[bias_at])
            opt.step()  # writes the replica the shadow pool syncs
            self.assertAlmostEqual(float(flat[bias_at]), old - 0.1 * float(grad[0]), places=5)


if __name__ == "__main__":
    unittest.main()
