import unittest

from calculator import add, mean, subtract


class OpsTest(unittest.TestCase):
    def test_add(self):
        self.assertEqual(add(2, 3), 5)
        self.assertEqual(add(-1, 1), 0)

    def test_subtract(self):
        self.assertEqual(subtract(5, 3), 2)

    def test_mean(self):
        self.assertEqual(mean([1, 2, 3]), 2)
        with self.assertRaises(ValueError):
            mean([])


if __name__ == "__main__":
    unittest.main()
