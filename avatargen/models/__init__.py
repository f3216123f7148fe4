"""What every family's models share: a model's declared block stacks and own init (structure.py), and building on
the meta device (meta.py). The architectures themselves live in each family's folder."""
