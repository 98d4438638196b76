"""shadowsync.pytorch against a real shadowsync-ps on 127.0.0.1: the
DDP-like wrapper (torchrun's environment, steps counted by forward passes,
the central model), embedding tables as modules with autograd (pooled bags,
gradients pushed on backward) and the dense checkpoint as a state_dict.
Expected values are worked out by hand. Run by ctest (python_torch)."""
import os
import signal
import tempfile
import unittest

import numpy as np
import torch

import shadowsync
from shadowsync.pytorch import Embedding, ShadowSync, load_dense_checkpoint
from test_binding import PS


def linear(value, n_in=2):
    m = torch.nn.Linear(n_in, 1, bias=False)
    with torch.no_grad():
        m.weight.fill_(value)
    return m


class WrapperTest(unittest.TestCase):
    def setUp(self):
        for k in [k for k in os.environ if k.startswith("SHADOWSYNC_")
                  and k not in ("SHADOWSYNC_LIBRARY", "SHADOWSYNC_PS_BIN", "SHADOWSYNC_LOG_LEVEL")]:
            del os.environ[k]
        for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
            os.environ.pop(k, None)

    def test_forward_steps_and_the_central_model(self):
        # Foreground S-EASGD, K = 1, alpha 0.5. A's forward runs its round:
        # the centre becomes A's 1. B's forward: d = 0.5 (3 - 1) = 1, so B is
        # 2 and the centre 2, which A reads while its own weight stays 1.
        x = torch.ones(1, 2)
        with PS() as ps:
            os.environ.update(RANK="1", WORLD_SIZE="2", LOCAL_RANK="1")
            b = ShadowSync(linear(3.0), ps=ps.address, sync="foreground", sync_every=1,
                           final_rounds=0, name="m")
            for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
                del os.environ[k]
            a = ShadowSync(linear(1.0), ps=ps.address, sync="foreground", sync_every=1,
                           final_rounds=0, name="m", rank=0, world_size=2)
            self.assertEqual((b.rank, b.world_size, a.rank), (1, 2, 0))
            self.assertEqual(a(x).item(), 2.0)  # A's round: nothing moves
            self.assertEqual(b(x).item(), 4.0)  # B's round first: 2 + 2
            self.assertIn('shadowsync_sync_rounds_total{trainer="rank1",group="m",algo="easgd"} 1',
                          b.trainer.metrics())
            central = a.central_state_dict()
            self.assertTrue(torch.equal(central["weight"], torch.full((1, 2), 2.0)))
            self.assertTrue(torch.equal(a.module.weight, torch.full((1, 2), 1.0)))
            with torch.no_grad():  # evaluation counts no step
                a(x)
            a.module.eval()
            a(x)
            self.assertEqual(a.group.stats()["iterations"], 1)
            a.close()
            b.close()
            self.assertEqual(a(x).item(), 2.0)  # the module outlives the trainer

    def test_rank_outside_world_is_refused(self):
        with self.assertRaisesRegex(ValueError, "rank 2 is not in"):
            ShadowSync(linear(1.0), sync="none", rank=2, world_size=2)

    def test_no_central_model_without_a_ps(self):
        with ShadowSync(linear(1.0), sync="none") as m:
            with self.assertRaisesRegex(shadowsync.ShadowSyncError, "no PS of its own"):
                m.central_state_dict()

    def test_dense_checkpoint_as_a_state_dict(self):
        # 8 floats in chunks of 3: the PS's checkpoint holds m[0:3), m[3:6),
        # m[6:8); joined, they are the centre: the one trainer's values.
        model = torch.nn.Linear(3, 2)
        with torch.no_grad():
            model.weight.copy_(torch.arange(6.0).view(2, 3))
            model.bias.copy_(torch.tensor([6.0, 7.0]))
        with tempfile.TemporaryDirectory() as d:
            with PS("--checkpoint-dir", d) as ps:
                with ShadowSync(model, ps=ps.address, sync="foreground", sync_every=1,
                                final_rounds=0, chunk_floats=3, name="m") as w:
                    w(torch.ones(1, 3))
                ps.proc.send_signal(signal.SIGTERM)  # writes dense.ckpt
                ps.proc.wait(timeout=30)
            fresh = torch.nn.Linear(3, 2)
            fresh.load_state_dict(load_dense_checkpoint(fresh, os.path.join(d, "dense.ckpt"),
                                                        "m"))
            self.assertTrue(torch.equal(fresh.weight, torch.arange(6.0).view(2, 3)))
            self.assertTrue(torch.equal(fresh.bias, torch.tensor([6.0, 7.0])))
            with self.assertRaisesRegex(KeyError, "no group 'x'"):
                load_dense_checkpoint(fresh, os.path.join(d, "dense.ckpt"), "x")


    @unittest.skipUnless(torch.cuda.is_available() and shadowsync.device_count() > 0,
                         "no CUDA device (or a build without CUDA)")
    def test_cuda_module_syncs_through_a_device_group(self):
        # The same by hand as test_forward_steps_and_the_central_model, the
        # modules on GPU 0: the parameters are views of device groups.
        x = torch.ones(1, 2, device="cuda")
        with PS() as ps:
            b = ShadowSync(linear(3.0).cuda(), ps=ps.address, sync="foreground", sync_every=1,
                           final_rounds=0, name="m", rank=1, world_size=2)
            a = ShadowSync(linear(1.0).cuda(), ps=ps.address, sync="foreground", sync_every=1,
                           final_rounds=0, name="m", rank=0, world_size=2)
            self.assertEqual(a.group.device, 0)
            self.assertEqual(a(x).item(), 2.0)
            self.assertEqual(b(x).item(), 4.0)
            self.assertTrue(torch.equal(a.central_state_dict()["weight"],
                                        torch.full((1, 2), 2.0)))
            a.close()
            b.close()
            self.assertEqual(a(x).item(), 2.0)

    def test_mixed_devices_are_refused(self):
        m = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1).double())
        with self.assertRaisesRegex(ValueError, "all on one device"):
            ShadowSync(m, sync="none")


class EmbeddingTest(unittest.TestCase):
    def table(self):
        t = shadowsync.Table("e", 2, mode="local", env=False, optimizer="sgd", lr=0.5)
        self.addCleanup(t.close)
        return t

    def test_bags_pool_and_push_their_gradients(self):
        # Bags {1, 2} and {2, 3}; loss = sum(out * W), W = [[1, 1], [2, 2]]:
        # d/d row = W's row of each bag the id is in: id 1 [1, 1], id 2
        # [3, 3], id 3 [2, 2]; SGD at lr 0.5 moves each row by -0.5 of it.
        for mode, scale in (("sum", 1.0), ("mean", 0.5)):
            table = self.table()
            before = table.lookup([1, 2, 3])
            emb = Embedding(table, mode=mode)
            out = emb(torch.tensor([1, 2, 2, 3]), torch.tensor([0, 2]))
            want = np.stack([before[0] + before[1], before[1] + before[2]]) * scale
            np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-6)
            (out * torch.tensor([[1.0, 1.0], [2.0, 2.0]])).sum().backward()
            grads = np.array([[1, 1], [3, 3], [2, 2]], np.float32) * scale
            np.testing.assert_allclose(table.lookup([1, 2, 3]), before - 0.5 * grads, rtol=1e-6)

    def test_rows_without_offsets_and_an_empty_bag(self):
        table = self.table()
        emb = Embedding(table)
        rows = emb(torch.tensor([5, 6]))
        self.assertEqual(tuple(rows.shape), (2, 2))
        out = emb(torch.tensor([5]), torch.tensor([0, 1]))  # the second bag is empty
        self.assertTrue(torch.equal(out[1], torch.zeros(2)))
        with self.assertRaisesRegex(ValueError, "offsets must start at 0"):
            emb(torch.tensor([5]), torch.tensor([1]))


if __name__ == "__main__":
    unittest.main()
