"""The bundled example job (installed as `tfctl.examples`, see README.md): `train.py` trains a
tiny MLP on scikit-learn's digits (`digits.py`: data, model and checkpoint layout) in whichever
of four styles its environment asks for, `evaluate.py` scores its checkpoints; the inventories
beside them (`two-hosts.yaml`, `beyond-the-lab.yaml`) start it on hosts, and `tfctl demo` runs
it on this machine."""
