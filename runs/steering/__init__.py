"""An operator steering a live run: pause, resume, instructions and the choice for a failed
step (models), the run page's section and the API. The Instruction and Recovery models are in
runs/models/steering.py; the engine's side is runs/engine/steering.py."""
