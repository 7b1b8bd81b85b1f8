"""AMD user-space driver: page tables, AddrSpace memory manager, simulated device."""

__all__: list[str] = []
