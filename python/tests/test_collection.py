"""shadowsync.pytorch.EmbeddingBagCollection and the binding's safety
rules, against real tables (and a real shadowsync-ps on 127.0.0.1 where
one is needed): the collection gives what 26 separate tables give, bit for
bit; bad ids are refused; the lr follows the optimizer's schedule; every
object raises after close; the central model after finish(); a module cast
after wrapping; a size mismatch; an unreachable table. Run by ctest
(python_binding)."""
import os
import time
import unittest
import warnings

import numpy as np
import torch

import shadowsync
from shadowsync.pytorch import (Embedding, EmbeddingBagCollection, ShadowSync, TableSpec,
                                shard_indices)
from test_binding import PS

ROWS = [1460, 583, 300, 200, 305, 24, 125, 633, 3, 931, 568, 835, 319, 27, 149, 546, 10, 565,
        217, 4, 704, 18, 15, 286, 105, 142]  # 26 tables of very different sizes


def clean_env():
    for k in [k for k in os.environ if k.startswith("SHADOWSYNC_")
              and k not in ("SHADOWSYNC_LIBRARY", "SHADOWSYNC_PS_BIN", "SHADOWSYNC_LOG_LEVEL")]:
        del os.environ[k]


def batch(gen, rows, bags=5):
    """Per table: ids, offsets (bags of 0-3 ids) and per-sample weights."""
    ids, offs, psw = [], [], []
    for n in rows:
        lengths = torch.randint(0, 4, (bags,), generator=gen)
        offs.append(torch.cumsum(lengths, 0) - lengths)
        ids.append(torch.randint(0, n, (int(lengths.sum()),), generator=gen))
        psw.append(torch.rand(int(lengths.sum()), generator=gen))
    return ids, offs, psw


class CollectionTest(unittest.TestCase):
    def setUp(self):
        clean_env()
        self.trainer = shadowsync.Trainer(sync="none", env=False)
        self.addCleanup(self.trainer.close)

    def collection(self, trainer, **kw):
        specs = [TableSpec(f"f{k}", n, 4, init_scale=1 / (k + 1)) for k, n in enumerate(ROWS)]
        return EmbeddingBagCollection(specs, trainer, mode="local", lr=0.25, **kw)

    def test_matches_separate_tables_bit_for_bit(self):
        ebc = self.collection(self.trainer)
        other = shadowsync.Trainer(sync="none", env=False)
        self.addCleanup(other.close)
        singles = [Embedding(other.table(f"f{k}", 4, lr=0.25, init_scale=1 / (k + 1)), rows=n)
                   for k, n in enumerate(ROWS)]
        gen = torch.Generator().manual_seed(7)
        weight = torch.randn(4, generator=gen)
        for step in range(4):
            ids, offs, psw = batch(gen, ROWS)
            got = ebc(ids, offs, per_sample_weights=psw)
            want = [e(i, o, per_sample_weights=w) for e, i, o, w in zip(singles, ids, offs, psw)]
            for g, w in zip(got, want):
                self.assertTrue(torch.equal(g, w), step)
            sum((g @ weight).pow(2).sum() for g in got).backward()
            sum((w @ weight).pow(2).sum() for w in want).backward()
        for k, n in enumerate(ROWS):
            a, b = ebc.tables[k].lookup(np.arange(n)), singles[k].table.lookup(np.arange(n))
            self.assertTrue(np.array_equal(a, b), f"table f{k}")

    def test_pools_as_nn_embedding_bag(self):
        """The same rows in nn.EmbeddingBag: the same pooled values (sum
        and mean, one id a bag and bags), gradients applied alike (repeated
        ids may add up in another order: within a float's rounding)."""
        for pooling in ("sum", "mean"):
            ebc = EmbeddingBagCollection([TableSpec(f"{pooling}{k}", n, 4)
                                          for k, n in enumerate(ROWS[:6])], self.trainer,
                                         mode="local", lr=0.5, pooling=pooling)
            bags = torch.nn.ModuleList(torch.nn.EmbeddingBag(n, 4, mode=pooling, sparse=True)
                                       for n in ROWS[:6])
            with torch.no_grad():
                for t, bag in zip(ebc.tables, bags):
                    bag.weight.copy_(torch.from_numpy(t.lookup(np.arange(bag.num_embeddings))))
            opt = torch.optim.SGD(bags.parameters(), lr=0.5)
            gen = torch.Generator().manual_seed(3)
            for step in range(3):
                ids, offs, _ = batch(gen, ROWS[:6])
                if step == 2:  # one id a bag, offsets 0..B-1
                    ids = [torch.randint(0, n, (5,), generator=gen) for n in ROWS[:6]]
                    offs = [torch.arange(5)] * 6
                got = ebc(ids, offs)
                want = [bag(i, o) for bag, i, o in zip(bags, ids, offs)]
                for g, w in zip(got, want):
                    self.assertTrue(torch.equal(g, w), (pooling, step))
                opt.zero_grad()
                sum(g.pow(2).sum() for g in got).backward()
                sum(w.pow(2).sum() for w in want).backward()
                opt.step()
            for t, bag in zip(ebc.tables, bags):
                np.testing.assert_allclose(t.lookup(np.arange(bag.num_embeddings)),
                                           bag.weight.detach().numpy(), rtol=0, atol=1e-6)

    def test_bad_ids_are_refused(self):
        ebc = self.collection(self.trainer)
        ids = [torch.zeros(1, dtype=torch.int64) for _ in ROWS]
        for k, bad, said in ((3, torch.tensor([200]), "table f3: id 200 is not in [0, 200)"),
                             (0, torch.tensor([-1]), "table f0: id -1 is not in [0, 1460)"),
                             (5, torch.tensor([1.0]), "table f5: ids are integers, not "
                                                      "torch.float32")):
            with self.assertRaises(ValueError) as e:
                ebc([bad if j == k else i for j, i in enumerate(ids)])
            self.assertEqual(str(e.exception), said)
        with self.assertRaisesRegex(ValueError, "26 tables, given 2 id tensors"):
            ebc(ids[:2])
        table = self.trainer.table("plain", 2)
        for bad, said in (([-3], "row ids are not negative"), ([0.5], "integers, not float64")):
            with self.assertRaisesRegex(shadowsync.ShadowSyncError, said):
                table.lookup(bad)
        with self.assertRaisesRegex(shadowsync.ShadowSyncError, r"shape \(2, 3\).*transposed"):
            table.push([1, 2, 3], np.ones((2, 3)))  # 3 ids of dim 2, given dim x ids

    def test_lr_follows_the_schedule(self):
        # SGD at the table's lr 0.25: a row's loss sum(row) moves it by -0.25
        # per float; with the optimizer's lr halved, by -0.125.
        ebc = self.collection(self.trainer)
        weight = torch.nn.Parameter(torch.ones(1))
        opt = torch.optim.SGD([weight], lr=1.0)
        ebc.follow_lr(opt)
        ids = [torch.tensor([1]) for _ in ROWS]
        for lr, moved in ((1.0, 0.25), (0.5, 0.125)):
            opt.param_groups[0]["lr"] = lr
            before = ebc.tables[2].lookup([1])
            sum(r.sum() for r in ebc(ids)).backward()
            np.testing.assert_allclose(before - ebc.tables[2].lookup([1]), moved, rtol=1e-6)

    def test_shard_indices(self):
        parts = [shard_indices(10, r, 3).tolist() for r in range(3)]
        self.assertEqual(parts, [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]])


class AfterCloseTest(unittest.TestCase):
    """Every object raises once its trainer (or table) is closed; arrays and
    tensors handed out keep their memory and stay readable."""

    def setUp(self):
        clean_env()

    def test_every_object_raises_after_close(self):
        t = shadowsync.Trainer(sync="none", env=False)
        g = t.add_dense("w", init=np.arange(4, dtype=np.float32))
        array, tensor = g.numpy(), g.torch()
        table = t.table("e", 2)
        group = shadowsync.TableGroup([table])
        fetch = table.prefetch([1, 2])
        many = group.push_prefetch([1], [1], np.ones(2), [3], [1])
        ebc = EmbeddingBagCollection([TableSpec("c", 10, 2)], t, mode="local")
        t.close()
        calls = {"step": t.step, "finish": t.finish, "metrics": t.metrics,
                 "add_dense": lambda: t.add_dense("x", 1), "table": lambda: t.table("x", 2),
                 "stats": g.stats, "numpy": g.numpy, "torch": g.torch, "read": g.read,
                 "read_central": g.read_central, "lookup": lambda: table.lookup([1]),
                 "push": lambda: table.push([1], np.ones(2)), "table stats": table.stats,
                 "prefetch": lambda: table.prefetch([1]), "warm": lambda: table.warm([1]),
                 "flush": table.flush, "fetch": fetch.wait, "fetch many": many.wait,
                 "group lookup": lambda: group.lookup([1], [1]),
                 "collection": lambda: ebc([torch.tensor([1])])}
        for name, call in calls.items():
            with self.assertRaises(shadowsync.ShadowSyncError, msg=name) as e:
                call()
            self.assertEqual(e.exception.name, "state", name)
        self.assertEqual(array.tolist(), [0, 1, 2, 3])  # kept alive, not freed
        self.assertEqual(tensor.tolist(), [0, 1, 2, 3])
        t.close()  # twice: nothing more

    def test_freed_memory_is_never_read(self):
        """No array holds the memory: close() frees it, and every call
        after raises before it could read it (under ASan in the sanitizer
        build: a read would be a heap-use-after-free)."""
        t = shadowsync.Trainer(sync="none", env=False)
        g = t.add_dense("w", size=1000)
        table = t.table("e", 8)
        table.push([1], np.ones(8))
        t.close()
        for call in (g.stats, g.read, g.numpy, lambda: table.lookup([1]), table.stats):
            with self.assertRaises(shadowsync.ShadowSyncError):
                call()

    def test_standalone_table_raises_after_close(self):
        table = shadowsync.Table("alone", 2, env=False)
        table.close()
        with self.assertRaisesRegex(shadowsync.ShadowSyncError, "table alone is closed"):
            table.lookup([1])


class WithPSTest(unittest.TestCase):
    def setUp(self):
        clean_env()
        for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
            os.environ.pop(k, None)

    def test_central_before_rounds_during_and_after_finish(self):
        with PS() as ps:
            kw = dict(ps=ps.address, sync="foreground", final_rounds=0, name="m", env=False)
            a = ShadowSync(torch.nn.Linear(2, 1, bias=False), sync_every=1000, rank=0,
                           world_size=2, **kw)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                before = a.central_state_dict()  # no round yet: its own values, said so
            self.assertTrue(torch.equal(before["weight"], a.module.weight.detach()))
            self.assertIn("no round has completed yet", str(caught[0].message))
            b = ShadowSync(torch.nn.Linear(2, 1, bias=False), sync_every=1, rank=1,
                           world_size=2, **kw)
            x = torch.ones(1, 2)
            for _ in range(3):
                b(x).sum().backward()
                with torch.no_grad():
                    b.module.weight -= 0.1
            a.finish()
            final = a.central_state_dict()["weight"]
            ps_now = torch.from_numpy(b.group.read_central()).view(1, 2)
            self.assertTrue(torch.equal(final, ps_now))  # the PS's, as finish left it
            plain = torch.nn.Linear(2, 1, bias=False)  # loads without a PS
            plain.load_state_dict(a.central_state_dict())
            self.assertTrue(torch.equal(plain.weight, final))
            a.close()
            b.close()

    def test_cast_after_wrapping_raises(self):
        for move in (lambda m: m.double(), lambda m: m.to(torch.float64)):
            m = ShadowSync(torch.nn.Linear(2, 1), sync="none", env=False)
            move(m.module)
            with self.assertRaisesRegex(RuntimeError, "moved or cast after wrapping"):
                m(torch.ones(1, 2, dtype=torch.float64))
            m.close()

    def test_size_mismatch_is_named(self):
        with PS() as ps:
            a = shadowsync.Trainer(ps=ps.address, sync="shadow", env=False)
            b = shadowsync.Trainer(ps=ps.address, sync="shadow", env=False)
            a.add_dense("model", size=4)
            with self.assertRaises(shadowsync.ShadowSyncError) as e:
                b.add_dense("model", size=5)
            self.assertIn("group size mismatch", e.exception.message)
            a.close()
            b.close()

    def test_a_trainer_serves_its_own_metrics(self):
        """http_listen="127.0.0.1:0": a trainer syncing in its own process (no
        agent) serves /metrics by the names an agent's trainers have, and
        /status with its groups' rounds."""
        import json
        import urllib.request

        with PS() as ps:
            m = ShadowSync(torch.nn.Linear(2, 1), ps=ps.address, sync="foreground",
                           sync_every=1, final_rounds=0, name="m", rank=0, world_size=1,
                           http_listen="127.0.0.1:0", env=False)
            m(torch.ones(1, 2)).sum().backward()
            base = "http://" + m.trainer.http_address()
            text = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
            self.assertIn('shadowsync_sync_rounds_total{trainer="rank0",group="m",algo="easgd"} 1',
                          text)
            self.assertIn('shadowsync_trainer_steps_total{trainer="rank0"} 1', text)
            status = json.loads(urllib.request.urlopen(base + "/status", timeout=10).read())
            self.assertEqual((status["role"], status["steps"]), ("trainer", 1))
            self.assertEqual(status["groups"][0]["rounds"], 1)
            m.close()
        t = shadowsync.Trainer(sync="none", env=False)
        with self.assertRaisesRegex(shadowsync.ShadowSyncError, "serves no HTTP"):
            t.http_address()
        t.close()

    def test_unreachable_table_is_named_within_2s(self):
        t0 = time.monotonic()
        with self.assertRaises(shadowsync.ShadowSyncError) as e:
            shadowsync.Table("ads", 8, mode="remote", ps="127.0.0.1:1", env=False)
        self.assertLess(time.monotonic() - t0, 2.5)
        self.assertEqual(e.exception.message, "table ads on emb_ps=127.0.0.1:1: cannot reach "
                                              "the PS at 127.0.0.1:1 (connection refused)")


if __name__ == "__main__":
    unittest.main()
