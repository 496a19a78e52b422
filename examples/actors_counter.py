"""A counter actor on the actor kernel (`agentrt.actors`): tell it to add, ask it for the total."""

import msgspec

from agentrt.actors import Actor, ActorSystem, run


class Add(msgspec.Struct, tag=True, frozen=True):
    n: int


class Get(msgspec.Struct, tag=True, frozen=True):
    pass


class Counter(Actor[Add | Get, int | None]):
    def __init__(self) -> None:
        self.total = 0

    async def receive(self, message: Add | Get) -> int | None:
        match message:
            case Add(n=n):
                self.total += n
                return None
            case Get():
                return self.total


async def main() -> None:
    async with ActorSystem() as system:
        counter = await system.spawn(Counter, name="counter")
        await counter.tell(Add(n=2))
        print(await counter.ask(Get(), timeout=1.0))


run(main)
