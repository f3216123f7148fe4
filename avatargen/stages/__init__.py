"""What every family's stages share. A family's stages (typed units, each coordinating one or more of its Modules
for one step of a chunk) live in its folder: avatargen/families/<name>/stages/."""
