"""What a decision rests on: the card's evidence (card), the signed decisions export (export,
its file format and verification in chain) and its download (views)."""
