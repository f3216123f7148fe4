"""avatargen as the face of a voice agent: ``LiveAvatar`` (live_avatar.py) speaks the audio it is given, live, on
one render session; livekit.py adapts it to LiveKit Agents' ``VideoGenerator`` (``pip install 'avatargen[livekit]'``)."""
