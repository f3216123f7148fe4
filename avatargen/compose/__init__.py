"""Reference compositing: the generated face put back into the reference picture, where the reference's own pixels
carry the identity and idle motion (head sway, blinks) moves them."""
