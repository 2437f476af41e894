"""Small helpers shared by every layer; nothing here imports a higher layer."""
