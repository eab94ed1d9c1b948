"""Tests of the engine (runs/engine/): the loop and its parts, crashes, races and recovery."""
